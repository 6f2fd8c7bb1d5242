//! `driftline capture`: a server's complete `tools/list` as a JSON tools array (with its instructions,
//! prompts and resources beside it, in an object, when it declares any), for CI pipelines that gate on
//! `driftline diff baseline.json current.json --fail-on breaking`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use clap::{Args, ValueEnum};
use driftline_probe::{ProbeError, ProbeTarget, TransportKind};

use super::{Unreachable, EXIT_OK};

#[derive(Debug, Args)]
pub struct CaptureArgs {
    /// The server's Streamable HTTP endpoint (or its SSE endpoint, with --transport sse).
    #[arg(long)]
    url: Option<String>,
    /// A request header for --url, as NAME=VALUE; repeat for more.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    headers: Vec<String>,
    /// How to speak to --url.
    #[arg(long, value_enum, requires = "url")]
    transport: Option<HttpTransport>,
    /// An environment variable for the command, as NAME=VALUE; repeat for more.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Write the tools array to FILE instead of standard output.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Seconds to connect, and then to read every page of tools/list.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout: u64,
    /// The command that starts a stdio server, after `--`: `driftline capture -- npx -y PACKAGE`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum HttpTransport {
    StreamableHttp,
    Sse,
}

pub(super) fn pairs(values: &[String], flag: &str) -> anyhow::Result<BTreeMap<String, String>> {
    values
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if !name.trim().is_empty() => Ok((name.trim().to_owned(), value.to_owned())),
            _ => Err(anyhow!("{flag} {pair:?}: expected NAME=VALUE")),
        })
        .collect()
}

pub fn run(args: CaptureArgs) -> anyhow::Result<ExitCode> {
    let mut target = ProbeTarget::named(driftline_schemas::ServerName::parse("capture")?);
    match (args.url, args.command.split_first()) {
        (Some(_), Some(_)) => bail!("give either --url or a command after --, not both"),
        (None, None) => bail!("give --url URL, or the command that starts a stdio server after --"),
        (Some(url), None) => {
            if !args.env.is_empty() {
                bail!("--env is for a command started over stdio, not for --url");
            }
            target.url = Some(url);
            target.headers = pairs(&args.headers, "--header")?;
            target.transport = args.transport.map(|t| match t {
                HttpTransport::StreamableHttp => TransportKind::StreamableHttp,
                HttpTransport::Sse => TransportKind::Sse,
            });
        }
        (None, Some((program, rest))) => {
            if !args.headers.is_empty() {
                bail!("--header is for --url, not for a command");
            }
            target.command = Some(program.clone());
            target.args = rest.to_vec();
            target.env = pairs(&args.env, "--env")?;
        }
    }
    let text = capture(&target, args.timeout)?;
    match &args.out {
        Some(path) => {
            std::fs::write(path, &text).with_context(|| format!("cannot write {}", path.display()))?
        }
        None => print!("{text}"),
    }
    Ok(ExitCode::from(EXIT_OK))
}

/// A live server's list over Streamable HTTP, as `driftline capture --url` writes it (`driftline diff --url`).
pub(super) fn capture_url(url: &str, headers: &[String], timeout_seconds: u64) -> anyhow::Result<String> {
    let mut target = ProbeTarget::named(driftline_schemas::ServerName::parse("capture")?);
    target.url = Some(url.to_owned());
    target.headers = pairs(headers, "--header")?;
    capture(&target, timeout_seconds)
}

/// The target's list as pretty JSON text: the tools array, or an object with the tools and what else the
/// server declares.
fn capture(target: &ProbeTarget, timeout_seconds: u64) -> anyhow::Result<String> {
    let endpoint = target.endpoint().map_err(|reason| anyhow!("{reason}"))?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let timeout = Duration::from_secs(timeout_seconds);
    let (tools, surfaces) =
        runtime.block_on(driftline_probe::capture(&endpoint, timeout)).map_err(|err| match err {
            ProbeError::Target(reason) => anyhow!("{reason}"),
            other => Unreachable(format!("cannot capture the tool list of {}: {other}", endpoint.describe()))
                .into(),
        })?;
    // Give a child's exit a moment to finish before the runtime (and with it the reaper) goes away.
    runtime.shutdown_timeout(Duration::from_secs(3));
    // serde_json's maps keep keys sorted (the `preserve_order` feature is off in this workspace), so the
    // output's key order is stable whatever order the server sent; tests/probe.rs checks it.
    // A server that declares nothing besides its tools is written as its tools array, as before; one with
    // instructions, prompts or resources as `{"tools": [...], "instructions": …, "prompts": [...], …}`
    // (what `driftline diff` and the tool-list PUT read).
    let output = if driftline_detectors::tool_drift::surfaces_empty(Some(&surfaces)) {
        serde_json::to_value(&tools)?
    } else {
        let mut object = serde_json::to_value(&surfaces)?;
        object["tools"] = serde_json::Value::Array(tools);
        object
    };
    let mut text = serde_json::to_string_pretty(&output)?;
    text.push('\n');
    Ok(text)
}
