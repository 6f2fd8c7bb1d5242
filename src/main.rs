//! `driftline`: one binary for the service stages and the command-line tools.

mod cli;
mod serve;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(cli::exit_code_of(&err))
        }
    }
}
