//! Command-line interface. Exit codes are the same for every output format:
//! 0 success; 1 `diff` found a change at or above `--fail-on`; 2 usage, input or I/O error.

mod diff;
mod replay;
mod shape;

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

pub const EXIT_OK: u8 = 0;
pub const EXIT_DRIFT: u8 = 1;
pub const EXIT_USAGE: u8 = 2;

#[derive(Debug, Parser)]
#[command(name = "driftline", version, about = "Watches MCP tool lists and tool return shapes for drift")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the shape of one return value (a JSON document in FILE, or stdin).
    Shape(shape::ShapeArgs),
    /// Diff two tool lists and classify every change; exit 1 when one reaches --fail-on.
    Diff(diff::DiffArgs),
    /// Run the return-shape detector over a file of spans (JSON Lines) and print its signals.
    Replay(replay::ReplayArgs),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    #[default]
    Text,
    Json,
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Shape(args) => shape::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Replay(args) => replay::run(args),
    }
}

/// Reads a file, or stdin for `-` or no path.
fn read_input(path: Option<&Path>) -> anyhow::Result<Vec<u8>> {
    match path {
        None => read_stdin(),
        Some(path) if path == Path::new("-") => read_stdin(),
        Some(path) => std::fs::read(path).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn read_stdin() -> anyhow::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::io::stdin().read_to_end(&mut bytes).context("cannot read standard input")?;
    Ok(bytes)
}
