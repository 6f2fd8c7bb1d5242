//! Command-line interface. Exit codes are the same for every output format:
//! 0 success; 1 `diff` found a change at or above `--fail-on`; 2 usage, input or I/O error; 3 a server
//! (driftline's, or the MCP server `capture` reads) cannot be reached or answers with an error.

mod capture;
mod client;
mod demo;
mod diff;
mod ignore;
mod impact;
mod releases;
mod replay;
mod reports;
mod shape;
mod upstream;

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

use crate::serve::Role;

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
    /// Which of a server's observed calls a candidate tool list would reject, before it ships (records
    /// nothing); exit 1 when any would be.
    Impact(impact::ImpactArgs),
    /// Run the return-shape detector over a file of spans (JSON Lines) and print its signals.
    Replay(replay::ReplayArgs),
    /// Run ingest, the detectors and the API in one process (embedded bus and SQLite store by default).
    Serve(ServeArgs),
    /// Run only the ingest stage: HTTP in, Kafka out (storage.bus = "kafka").
    Ingest(ServeArgs),
    /// Run only a detector worker: Kafka in, ClickHouse out (bus = "kafka", store = "clickhouse").
    Detect(ServeArgs),
    /// Run only the query API and dashboard over ClickHouse; operator commands go to Kafka.
    Api(ServeArgs),
    /// Run only the prober: `[[probe.servers]]` in, tool lists and probe failures to Kafka.
    Probe(ServeArgs),
    /// Run only the notifier: new drift events and DOWN/UP transitions from ClickHouse to `[[notify.webhooks]]`.
    Notify(ServeArgs),
    /// Print an MCP server's complete tools/list as a JSON tools array (for CI: capture, then `diff`).
    Capture(capture::CaptureArgs),
    /// A watched server's releases on npm and PyPI, installed and captured in a sandbox before your agents
    /// run them.
    /// Without a subcommand: run only the upstream watcher (`[[upstream]]` packages polled on npm and PyPI,
    /// each new release captured in a sandbox) with its lists to Kafka.
    #[command(args_conflicts_with_subcommands = true)]
    Upstream {
        #[command(subcommand)]
        command: Option<upstream::UpstreamCommand>,
        #[command(flatten)]
        serve: ServeArgs,
    },
    /// Check a configuration (file, then DRIFTLINE__… environment) for a stage without starting it.
    CheckConfig {
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        #[arg(long, value_parser = ["serve", "ingest", "detect", "api", "probe", "notify", "upstream"], default_value = "serve")]
        stage: String,
    },
    /// Create the ClickHouse database and tables of `[clickhouse]` (idempotent, versioned).
    Migrate {
        #[arg(long)]
        config: Option<std::path::PathBuf>,
    },
    /// Create (or describe) the Kafka topics of `[kafka]`.
    Topics {
        /// create | describe | migrate-partitioner (once, after upgrading from a driftline whose producer
        /// partitioned by CRC32: moves detector state to the murmur2 partitions; detectors stopped, lag 0).
        #[arg(value_parser = ["create", "describe", "migrate-partitioner"])]
        action: String,
        #[arg(long)]
        config: Option<std::path::PathBuf>,
    },
    /// Server health: status, tools, schema hash, open drift (exit 1 when a server is not UP).
    Health {
        #[arg(long)]
        server: Option<String>,
        /// Also what each server's tools and instructions cost a model's context, and when it was last seen.
        #[arg(long)]
        wide: bool,
        #[command(flatten)]
        connection: client::Connection,
    },
    /// The newest drift of a server as a structural diff, with the agents it affects.
    Drift {
        server: String,
        #[arg(long, default_value_t = 24)]
        hours: u32,
        #[command(flatten)]
        connection: client::Connection,
    },
    /// Which agents call a tool, how often, how many fail, and their risk.
    DriftImpact {
        server: String,
        #[arg(long)]
        tool: String,
        #[arg(long, default_value_t = 24)]
        hours: u32,
        #[command(flatten)]
        connection: client::Connection,
    },
    /// For users of the documented CLI: `mcp-health` is `health`, `mcp-health --drift SERVER` is `drift SERVER`.
    McpHealth {
        /// Show the newest drift of this server instead of the health table.
        #[arg(long)]
        drift: Option<String>,
        #[arg(long)]
        server: Option<String>,
        #[arg(long, default_value_t = 24)]
        hours: u32,
        #[command(flatten)]
        connection: client::Connection,
    },
    /// The project's detector settings; `--baseline manual|auto|compatible` sets the baseline policy and
    /// `--security-hold medium|high` the least security-flag severity that holds a change (admin key).
    Settings {
        #[arg(long, value_enum)]
        baseline: Option<PolicyArg>,
        #[arg(long, value_enum)]
        security_hold: Option<HoldArg>,
        #[command(flatten)]
        connection: client::Connection,
    },
    /// Accept a server's newest tool list as its baseline (admin key).
    DriftAccept {
        server: String,
        #[command(flatten)]
        connection: client::Connection,
    },
    /// Free the detector state of a server and its tools, or of one tool (admin key): a project at its
    /// limits recovers the room, and what is forgotten starts a new baseline when seen again.
    Forget {
        server: String,
        tool: Option<String>,
        #[command(flatten)]
        connection: client::Connection,
    },
    /// A tool's declared output schema next to what it returns (exit 1 while its returns mostly mismatch).
    Contract {
        server: String,
        tool: String,
        #[command(flatten)]
        connection: client::Connection,
    },
    /// The tools a server declares, with their parameters.
    Schema {
        server: String,
        #[command(flatten)]
        connection: client::Connection,
    },
    /// Send a scripted scenario to a running server and show what driftline sees.
    Demo {
        /// Leave the drift open instead of accepting the new baseline at the end.
        #[arg(long)]
        keep_drift: bool,
        #[command(flatten)]
        connection: client::Connection,
    },
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Configuration file (default: ./driftline.toml when present).
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Overrides server.bind.
    #[arg(long)]
    bind: Option<String>,
    /// Overrides storage.data_dir.
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
}

/// `--baseline`: when a new tool list becomes the baseline without an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PolicyArg {
    /// Every new tool list waits for `drift-accept`.
    Manual,
    /// Every new tool list is accepted as it arrives (its event is still recorded).
    Auto,
    /// A tool list whose changes are all COMPATIBLE is accepted as it arrives; the rest waits.
    Compatible,
}

/// `--security-hold`: the least security-flag severity that holds a tool-list change for a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HoldArg {
    /// Medium and high flags hold a change (the default).
    Medium,
    /// Only high flags hold a change.
    High,
}

impl From<HoldArg> for driftline_schemas::SecurityHold {
    fn from(hold: HoldArg) -> Self {
        match hold {
            HoldArg::Medium => Self::Medium,
            HoldArg::High => Self::High,
        }
    }
}

impl From<PolicyArg> for driftline_schemas::BaselinePolicy {
    fn from(policy: PolicyArg) -> Self {
        match policy {
            PolicyArg::Manual => Self::Manual,
            PolicyArg::Auto => Self::Auto,
            PolicyArg::Compatible => Self::Compatible,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    #[default]
    Text,
    Json,
}

/// For commands that only print: a reader that stops early (`| head`) ends them quietly, as it ends any
/// Unix filter, instead of a panic in `println!` with a backtrace. Rust ignores SIGPIPE by default, and the
/// service commands keep it so (their sockets report a closed peer as an error).
fn end_quietly_when_the_reader_stops() {
    #[cfg(unix)]
    // SAFETY: called before the command starts any thread; it restores the default disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if matches!(cli.command, Command::Shape(_) | Command::Diff(_) | Command::Replay(_)) {
        end_quietly_when_the_reader_stops();
    }
    match cli.command {
        Command::Shape(args) => shape::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Impact(args) => impact::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Serve(args) => serve(args, Role::All),
        Command::Ingest(args) => serve(args, Role::Ingest),
        Command::Detect(args) => serve(args, Role::Detect),
        Command::Api(args) => serve(args, Role::Api),
        Command::Probe(args) => serve(args, Role::Probe),
        Command::Notify(args) => serve(args, Role::Notify),
        Command::Capture(args) => capture::run(args),
        Command::Upstream { command: Some(command), .. } => upstream::run(command),
        Command::Upstream { command: None, serve: args } => serve(args, Role::Upstream),
        Command::CheckConfig { config, stage } => {
            let config = driftline::config::Config::load(config.as_deref())?;
            let role = match stage.as_str() {
                "ingest" => Role::Ingest,
                "detect" => Role::Detect,
                "api" => Role::Api,
                "probe" => Role::Probe,
                "notify" => Role::Notify,
                "upstream" => Role::Upstream,
                _ => Role::All,
            };
            crate::serve::check_role(&config, role)?;
            println!(
                "configuration ok for driftline {}: bus {:?}, store {:?}, {} API keys",
                role.name(),
                config.storage.bus,
                config.storage.store,
                config.auth.keys.len()
            );
            Ok(ExitCode::from(EXIT_OK))
        }
        Command::Migrate { config } => {
            let config = driftline::config::Config::load(config.as_deref())?;
            let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            runtime.block_on(crate::serve::migrate(&config))?;
            Ok(ExitCode::from(EXIT_OK))
        }
        Command::Topics { action, config } => {
            let config = driftline::config::Config::load(config.as_deref())?;
            let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            if action == "migrate-partitioner" {
                runtime.block_on(crate::serve::migrate_partitioner(&config))?;
            } else {
                runtime.block_on(crate::serve::topics(&config, action == "create"))?;
            }
            Ok(ExitCode::from(EXIT_OK))
        }
        Command::Health { server, wide, connection } => {
            client::health(&client::Api::new(connection), server.as_deref(), wide)
        }
        Command::Drift { server, hours, connection } => {
            client::drift(&client::Api::new(connection), &server, hours)
        }
        Command::McpHealth { drift: Some(server), hours, connection, .. } => {
            client::drift(&client::Api::new(connection), &server, hours)
        }
        Command::McpHealth { drift: None, server, connection, .. } => {
            client::health(&client::Api::new(connection), server.as_deref(), false)
        }
        Command::Settings { baseline, security_hold, connection } => client::settings(
            &client::Api::new(connection),
            baseline.map(Into::into),
            security_hold.map(Into::into),
        ),
        Command::DriftImpact { server, tool, hours, connection } => {
            client::drift_impact(&client::Api::new(connection), &server, &tool, hours)
        }
        Command::DriftAccept { server, connection } => {
            client::drift_accept(&client::Api::new(connection), &server)
        }
        Command::Schema { server, connection } => client::schema(&client::Api::new(connection), &server),
        Command::Forget { server, tool, connection } => {
            client::forget(&client::Api::new(connection), &server, tool.as_deref())
        }
        Command::Contract { server, tool, connection } => {
            client::contract(&client::Api::new(connection), &server, &tool)
        }
        Command::Demo { keep_drift, connection } => demo::run(&client::Api::new(connection), !keep_drift),
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

fn serve(args: ServeArgs, role: Role) -> anyhow::Result<ExitCode> {
    let mut config = driftline::config::Config::load(args.config.as_deref())?;
    if let Some(bind) = args.bind {
        config.server.bind = bind;
    }
    if let Some(dir) = args.data_dir {
        config.storage.data_dir = dir;
    }
    config.validate()?;
    crate::serve::check_role(&config, role)?;
    init_logging(&config.log);
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(crate::serve::serve(config, role))?;
    Ok(ExitCode::from(EXIT_OK))
}

fn init_logging(log: &driftline::config::LogConfig) {
    let filter = tracing_subscriber::EnvFilter::try_new(&log.level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match log.format {
        driftline::config::LogFormat::Json => builder.json().try_init(),
        driftline::config::LogFormat::Text => builder.try_init(),
    };
}

/// A query-string value or path segment as a URL carries it: tool names come from servers and may hold `&`,
/// `#`, `/` or spaces.
pub fn query_value(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A failure that is the server's, not the user's (a driftline or an MCP server that cannot be reached, or
/// answers with an error): exit 3.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unreachable(pub String);

/// Usage and input errors exit 2; a server that cannot be reached or answers with an error exits 3.
pub fn exit_code_of(err: &anyhow::Error) -> u8 {
    if err.downcast_ref::<Unreachable>().is_some() {
        client::EXIT_UNREACHABLE
    } else {
        EXIT_USAGE
    }
}
