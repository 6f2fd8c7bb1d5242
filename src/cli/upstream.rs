//! `driftline upstream check npm:@scope/name@VERSION --against LIST.json`: a release installed and started in
//! a sandbox, its lists captured and diffed against what you run, without the service (for CI). Exit 1 on a
//! change at or above `--fail-on` (BREAKING by default), 0 otherwise, 3 when it could not be installed or
//! captured (or no sandbox could be made: nothing runs unsandboxed).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Context};
use clap::{Args, Subcommand};
use driftline_schemas::api::{ServerHealth, ToolSchema};
use driftline_schemas::{Classification, UpcomingRelease};
use driftline_upstream::{Follow, Launch, Registries, SourceSpec, Upstream, UpstreamError, UpstreamSettings};
use serde_json::{json, Value};

use super::client::{Api, Connection};
use super::diff::{self, FailOn, Input, ReportArgs};
use super::releases::release_summary;
use super::{Format, Unreachable, EXIT_DRIFT, EXIT_OK};

#[derive(Debug, Subcommand)]
pub enum UpstreamCommand {
    /// Install one release in a sandbox, capture its lists, and diff them against a list file or a server
    /// driftline watches (exit 1 on BREAKING, 0 otherwise, 3 when it could not install or capture).
    Check(Box<CheckArgs>),
    /// The releases the upstream watcher captured: per server, the release in use, the newest, and what it
    /// would change (exit 1 when a newest release would break something).
    List {
        /// Only this server's releases, each with what it changes.
        server: Option<String>,
        #[command(flatten)]
        connection: Connection,
    },
    /// Accept a captured release ahead (admin key): when the server runs it, its list becomes the baseline
    /// at once instead of waiting for `drift-accept`.
    Accept {
        server: String,
        version: String,
        #[command(flatten)]
        connection: Connection,
    },
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The release: npm:NAME, npm:@SCOPE/NAME or pypi:NAME, with @VERSION (or ==VERSION for PyPI), or
    /// mcp-registry:NAMESPACE/NAME[@SERVER_VERSION] (the npm or PyPI package that version of the server
    /// names); without a version, the newest release on the registry.
    package: String,
    /// What you run now: a list file (`driftline capture`'s output), or with --url the name of a server
    /// driftline watches (compared on what driftline's API serves of its tools: names, descriptions, input
    /// schemas).
    #[arg(long)]
    against: String,
    /// driftline's address, when --against names a server.
    #[arg(long)]
    url: Option<String>,
    /// API key for --url (sent as `Authorization: Bearer …`).
    #[arg(long, env = "DRIFTLINE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// An environment variable for the server, as NAME=VALUE; repeat for more.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Also write the captured list to FILE.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// npm's registry.
    #[arg(long, env = "DRIFTLINE_NPM_REGISTRY", default_value = "https://registry.npmjs.org/")]
    npm_registry: String,
    /// PyPI's base address (`BASE/simple/` is its index, `BASE/pypi/NAME/json` its metadata).
    #[arg(long, env = "DRIFTLINE_PYPI_URL", default_value = "https://pypi.org/")]
    pypi_url: String,
    /// The MCP Registry's base address, for mcp-registry: names.
    #[arg(long, env = "DRIFTLINE_MCP_REGISTRY", default_value = "https://registry.modelcontextprotocol.io/")]
    mcp_registry: String,
    /// Where releases are installed (kept between runs); default: ~/.cache/driftline/upstream.
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// The host's Python, which makes a PyPI release's virtualenv.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Seconds to install the release.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=3600))]
    install_timeout: u64,
    /// Seconds to start the server and read every list.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout: u64,
    /// Address space of each sandboxed process, in MiB.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(64..=1_048_576))]
    memory_mb: u64,
    #[command(flatten)]
    report: ReportArgs,
    /// The command that starts the release's server, after `--` (a bare name is looked up among the
    /// package's programs first); default: the package's own program.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

pub fn run(command: UpstreamCommand) -> anyhow::Result<ExitCode> {
    match command {
        UpstreamCommand::Check(args) => check(*args),
        UpstreamCommand::List { server, connection } => list(&Api::new(connection), server.as_deref()),
        UpstreamCommand::Accept { server, version, connection } => {
            accept(&Api::new(connection), &server, &version)
        }
    }
}

/// The default cache: `$XDG_CACHE_HOME/driftline/upstream`, else `~/.cache/driftline/upstream`.
fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("driftline").join("upstream")
}

fn with_slash(url: &str) -> String {
    if url.ends_with('/') {
        url.to_owned()
    } else {
        format!("{url}/")
    }
}

fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    // The server's own stderr (why it did not start) reaches the user through the prober's log.
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn,driftline_probe=info".to_owned());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(false)
        .try_init();
    let spec: SourceSpec = args.package.parse()?;
    let mut launch = Launch {
        command: args.command.clone(),
        env: super::capture::pairs(&args.env, "--env")?,
        default_args: Vec::new(),
    };
    // What it is compared against is read first: a wrong path is a usage error, before any install.
    let against = match &args.url {
        None => {
            let path = PathBuf::from(&args.against);
            Input { text: super::read_input(Some(&path))?, path: args.against.clone() }
        }
        Some(url) => server_list(url, args.api_key.clone(), &args.against)?,
    };
    let settings = UpstreamSettings {
        cache_dir: args.cache_dir.clone().unwrap_or_else(default_cache_dir),
        registries: Registries {
            npm: with_slash(&args.npm_registry),
            pypi: with_slash(&args.pypi_url),
            mcp: with_slash(&args.mcp_registry),
        },
        python: args.python.clone(),
        install_timeout: Duration::from_secs(args.install_timeout),
        capture_timeout: Duration::from_secs(args.timeout),
        limits: driftline_upstream::Limits { memory_bytes: args.memory_mb << 20, ..Default::default() },
    };
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let captured = runtime.block_on(async {
        let upstream = Upstream::new(settings).await?;
        let (package, release) = match spec {
            SourceSpec::Package(spec) => {
                let release = upstream.resolve(&spec, &Follow::default()).await?;
                (spec.package, release)
            }
            SourceSpec::McpRegistry { name, version } => {
                let found = upstream.resolve_registry(&name, version.as_ref(), &Follow::default()).await?;
                eprintln!(
                    "mcp-registry:{name} {} runs {}",
                    found.server_version,
                    found.package.pinned(&found.release.version)
                );
                launch.default_args = found.arguments;
                (found.package, found.release)
            }
        };
        eprintln!("installing {} in the sandbox", package.pinned(&release.version));
        upstream.capture(&package, &release.version, &launch).await
    });
    runtime.shutdown_timeout(Duration::from_secs(3));
    let captured = captured.map_err(|err| match err {
        // A name the registry does not have is still the registry's answer, as a server's error is.
        err @ (UpstreamError::Sandbox(_)
        | UpstreamError::Registry(_)
        | UpstreamError::NotFound(_)
        | UpstreamError::NoRelease(_)
        | UpstreamError::Install(_)
        | UpstreamError::Capture(_)
        | UpstreamError::Setup(_)) => anyhow!(Unreachable(err.to_string())),
    })?;
    let pinned = captured.installed.package.pinned(&captured.installed.version);
    eprintln!("captured {} tools of {pinned} in {:.1} s", captured.tools.len(), captured.seconds);
    let mut list = if driftline_detectors::tool_drift::surfaces_empty(Some(&captured.surfaces)) {
        json!(captured.tools)
    } else {
        let mut object = serde_json::to_value(&captured.surfaces)?;
        object["tools"] = Value::Array(captured.tools);
        object
    };
    if let Some(path) = &args.out {
        let mut text = serde_json::to_string_pretty(&list)?;
        text.push('\n');
        std::fs::write(path, &text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if args.url.is_some() {
        list = comparable(list);
    }
    let new = Input { text: serde_json::to_vec_pretty(&list)?, path: pinned };
    let mut report = args.report;
    report.fail_on = Some(report.fail_on.unwrap_or(FailOn::Breaking));
    diff::report(against, new, &report)
}

/// A watched server's tools as driftline's API serves them (name, description, input schema), with the
/// instructions, prompts and resources of its newest capture.
fn server_list(url: &str, api_key: Option<String>, server: &str) -> anyhow::Result<Input> {
    let api = super::client::Api::new(super::client::Connection {
        url: url.to_owned(),
        ingest_url: None,
        api_key,
        format: super::Format::Json,
    });
    let name = super::query_value(server);
    let tools: Vec<ToolSchema> = api.get(&format!("/api/servers/{name}/tools"))?;
    if tools.is_empty() {
        return Err(anyhow!(Unreachable(format!(
            "driftline at {url} has no tool list of server {server:?}"
        ))));
    }
    let surfaces: Value = api.get(&format!("/api/servers/{name}/surfaces"))?;
    let tools: Vec<Value> = tools
        .into_iter()
        .map(|tool| {
            let mut entry = json!({"name": tool.tool_name, "inputSchema": tool.input_schema});
            if let Some(description) = tool.description {
                entry["description"] = Value::String(description);
            }
            entry
        })
        .collect();
    let mut list = surfaces;
    if !list.is_object() {
        list = json!({});
    }
    list["tools"] = Value::Array(tools);
    Ok(Input { text: serde_json::to_vec_pretty(&list)?, path: format!("{url} server {server}") })
}

/// The captured list cut to what the API serves of a server's tools, so a field it does not serve is not
/// reported as changed.
fn comparable(mut list: Value) -> Value {
    let tools = match &mut list {
        Value::Array(tools) => tools,
        Value::Object(object) => match object.get_mut("tools") {
            Some(Value::Array(tools)) => tools,
            _ => return list,
        },
        _ => return list,
    };
    for tool in tools.iter_mut() {
        if let Value::Object(fields) = tool {
            fields.retain(|key, _| matches!(key.as_str(), "name" | "description" | "inputSchema"));
        }
    }
    list
}

fn list(api: &Api, server: Option<&str>) -> anyhow::Result<ExitCode> {
    let releases: Vec<UpcomingRelease> = api.get("/api/upstream")?;
    let servers: Vec<ServerHealth> = api.get("/api/health/servers")?;
    let releases: Vec<UpcomingRelease> =
        releases.into_iter().filter(|r| server.is_none_or(|name| r.server_name == name)).collect();
    let mut names: Vec<&str> = releases.iter().map(|r| r.server_name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let newest: Vec<&UpcomingRelease> =
        names.iter().filter_map(|name| releases.iter().find(|r| r.server_name == *name)).collect();
    let breaking = newest.iter().any(|r| r.max_classification == Some(Classification::Breaking));
    if api.format() == Format::Json {
        println!("{}", serde_json::to_string_pretty(&releases)?);
        return Ok(ExitCode::from(if breaking { EXIT_DRIFT } else { EXIT_OK }));
    }
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::NOTHING).set_header(vec![
        "SERVER",
        "PACKAGE",
        "IN USE",
        "NEWEST",
        "RELEASED",
        "VERDICT",
        "PIN TO STAY",
    ]);
    for release in &newest {
        let hash = servers
            .iter()
            .find(|s| s.server_name == release.server_name)
            .and_then(|s| s.schema_hash.as_deref());
        let summary = release_summary(hash, &release.server_name, &releases);
        let counts =
            |class: Classification| release.changes.iter().filter(|c| c.classification == class).count();
        let verdict = match (&release.error, release.max_classification) {
            (Some(error), _) => format!("not captured: {}", error.chars().take(80).collect::<String>()),
            (None, None) => "no change".to_owned(),
            (None, Some(worst)) => format!(
                "{} ({} breaking · {} warning · {} compatible)",
                worst.as_str(),
                counts(Classification::Breaking),
                counts(Classification::Warning),
                counts(Classification::Compatible)
            ),
        };
        let pin = summary.in_use.as_ref().filter(|in_use| **in_use != release.version).map_or_else(
            || "-".to_owned(),
            |in_use| match release.package.split_once(':') {
                Some(("npm", name)) => format!("{name}@{in_use}"),
                Some((_, name)) => format!("{name}=={in_use}"),
                None => "-".to_owned(),
            },
        );
        table.add_row(vec![
            release.server_name.clone(),
            release.package.clone(),
            summary.in_use.unwrap_or_else(|| "?".into()),
            release.version.clone(),
            release.released_at.map_or_else(|| "-".into(), |at| at.to_string()),
            verdict,
            pin,
        ]);
    }
    println!("{table}");
    if let (Some(_), Some(release)) = (server, newest.first()) {
        for change in &release.changes {
            let place = if change.path.is_empty() { String::new() } else { format!(" · {}", change.path) };
            println!(
                "  {:<10} {:<26} {}{place}",
                change.classification.as_str(),
                change.change_type.to_string(),
                change.tool_name
            );
        }
    }
    if newest.is_empty() {
        println!("No release captured yet: configure [[upstream]] packages (see the README).");
    }
    Ok(ExitCode::from(if breaking { EXIT_DRIFT } else { EXIT_OK }))
}

fn accept(api: &Api, server: &str, version: &str) -> anyhow::Result<ExitCode> {
    let path = format!("/api/upstream/{}/accept", super::query_value(server));
    let (status, body) = api.send("POST", &path, &json!({ "version": version }))?;
    match status {
        200 => println!(
            "{server} {version} accepted ahead: its list becomes the baseline when the server runs it"
        ),
        202 => println!("{server} {version}: acceptance queued behind the data"),
        _ => {
            let message = body.get("error").and_then(Value::as_str).unwrap_or("no reason given");
            return Err(anyhow!("{status}: {message}"));
        }
    }
    Ok(ExitCode::from(EXIT_OK))
}
