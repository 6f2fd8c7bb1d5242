//! Upstream releases (issue #46): a watched server's package on npm or PyPI (named, or found through the
//! MCP Registry), each new version installed and started in a sandbox, its lists captured over stdio before
//! any agent restarts onto it.
//!
//! `registry.rs` reads npm's and PyPI's metadata, `mcp_registry.rs` the MCP Registry's, `install.rs` installs a version with the ecosystem's
//! client, `sandbox.rs` is where a package's code runs, `package.rs` checks names and versions. This crate
//! does not diff: what a captured list changes is decided by `driftline diff` (the CLI) and the tool-list
//! detector (the service).

mod events;
pub mod install;
pub mod mcp_registry;
mod metrics;
pub mod package;
pub mod registry;
pub mod sandbox;
pub mod watch;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use driftline_probe::{Endpoint, ProbeError};
use driftline_schemas::ServerSurfaces;
use serde_json::Value;

pub use install::{Installed, Installer};
pub use mcp_registry::{RegistryName, RegistryRelease};
pub use package::{Ecosystem, Package, PackageSpec, Source, SourceSpec, SpecError, Version};
pub use registry::{Fetched, Follow, Registries, Release};
pub use sandbox::{Limits, Sandbox, SandboxError};

#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("registry: {0}")]
    Registry(String),
    #[error("{0} is not on its registry")]
    NotFound(String),
    #[error("{0} has no release to follow")]
    NoRelease(String),
    #[error("install: {0}")]
    Install(String),
    #[error("capture: {0}")]
    Capture(String),
    #[error("setup: {0}")]
    Setup(String),
}

/// Everything a check needs, as configured (`[upstream]`).
#[derive(Debug, Clone)]
pub struct UpstreamSettings {
    pub cache_dir: PathBuf,
    pub registries: Registries,
    /// The host's Python (a name on PATH or a path) that makes each PyPI install's virtualenv.
    pub python: String,
    pub install_timeout: Duration,
    /// Starting the server and reading every list.
    pub capture_timeout: Duration,
    pub limits: Limits,
}

/// How a captured version's server is started: a configured program (a bare name is looked up among the
/// package's own programs first) and arguments, or the package's default; and its environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Launch {
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Arguments after the package's own program when `command` names none (an MCP Registry entry's).
    pub default_args: Vec<String>,
}

/// The sandbox and the installer, set up once.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub settings: UpstreamSettings,
    pub sandbox: Sandbox,
    pub installer: Installer,
    pub http: reqwest::Client,
}

/// A version's lists, captured in the sandbox.
#[derive(Debug, Clone)]
pub struct Captured {
    pub installed: Installed,
    pub tools: Vec<Value>,
    pub surfaces: ServerSurfaces,
    pub seconds: f64,
}

impl Upstream {
    /// Finds the runtimes and the sandbox; fails (and nothing is ever run) without a sandbox.
    pub async fn new(settings: UpstreamSettings) -> Result<Upstream, UpstreamError> {
        let (python, python_prefix) = real_python(&settings.python).await;
        let mut prefixes: Vec<PathBuf> = python_prefix.into_iter().collect();
        let mut runtime_bins = Vec::new();
        for program in ["node", "npm"] {
            if let Some(found) =
                sandbox::find_program(program).and_then(|path| std::fs::canonicalize(path).ok())
            {
                // node at PREFIX/bin/node; npm's script at PREFIX/lib/node_modules/npm/bin/npm-cli.js.
                if let Some(prefix) = found.ancestors().find(|dir| dir.join("bin").join("node").is_file()) {
                    prefixes.push(prefix.to_owned());
                    runtime_bins.push(prefix.join("bin"));
                }
            }
        }
        prefixes.sort();
        prefixes.dedup();
        runtime_bins.sort();
        runtime_bins.dedup();
        let sandbox = Sandbox::detect(settings.limits.clone(), &prefixes).await?;
        std::fs::create_dir_all(&settings.cache_dir).map_err(|err| {
            UpstreamError::Setup(format!(
                "cannot create the cache directory {}: {err}",
                settings.cache_dir.display()
            ))
        })?;
        let installer = Installer {
            cache_dir: settings.cache_dir.clone(),
            npm_registry: settings.registries.npm.clone(),
            pypi_index: settings.registries.pypi_index(),
            python,
            runtime_bins,
            timeout: settings.install_timeout,
        };
        let http = reqwest::Client::builder()
            .user_agent(concat!("driftline/", env!("CARGO_PKG_VERSION"), " (upstream releases)"))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|err| UpstreamError::Setup(format!("cannot build the HTTP client: {err}")))?;
        Ok(Upstream { settings, sandbox, installer, http })
    }

    /// The package release an MCP Registry server version (or its newest) names.
    pub async fn resolve_registry(
        &self,
        name: &RegistryName,
        version: Option<&Version>,
        follow: &Follow,
    ) -> Result<RegistryRelease, UpstreamError> {
        let base = &self.settings.registries.mcp;
        let wanted = version.map(Version::as_str);
        match mcp_registry::fetch(&self.http, base, name, follow, wanted, None).await? {
            mcp_registry::RegistryFetched::Release { release: Some(release), .. } => Ok(release),
            _ => Err(UpstreamError::NoRelease(format!(
                "mcp-registry:{name}{} (no version with an npm or PyPI package started over stdio)",
                wanted.map(|v| format!("@{v}")).unwrap_or_default()
            ))),
        }
    }

    /// The release `spec` names, or the newest one its registry lists.
    pub async fn resolve(&self, spec: &PackageSpec, follow: &Follow) -> Result<Release, UpstreamError> {
        if let Some(version) = &spec.version {
            return Ok(Release { version: version.clone(), released_at: None });
        }
        match registry::fetch(&self.http, &self.settings.registries, &spec.package, follow, None).await? {
            Fetched::Releases { newest: Some(release), .. } => Ok(release),
            _ => Err(UpstreamError::NoRelease(spec.package.to_string())),
        }
    }

    /// Installs the version and captures its lists in the sandbox, without the network.
    pub async fn capture(
        &self,
        package: &Package,
        version: &Version,
        launch: &Launch,
    ) -> Result<Captured, UpstreamError> {
        let installed = self.installer.install(&self.sandbox, package, version).await?;
        let (program, args) = match launch.command.split_first() {
            Some((program, args)) => (installed.program(program), args.to_vec()),
            None => (installed.default_program()?, launch.default_args.clone()),
        };
        let scratch = self.settings.cache_dir.join("scratch").join(format!(
            "run-{}-{}",
            std::process::id(),
            chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
        ));
        std::fs::create_dir_all(&scratch)
            .map_err(|err| UpstreamError::Capture(format!("cannot create {}: {err}", scratch.display())))?;
        let mut env = self.installer.base_env(&scratch, Some(&installed.bin_dir), false);
        env.extend(launch.env.clone());
        let job = sandbox::Job {
            network: false,
            scratch: scratch.clone(),
            writable: Vec::new(),
            readable: vec![installed.dir.clone()],
            env,
            program: program.display().to_string(),
            args,
        };
        let endpoint = Endpoint::Stdio(self.sandbox.command(&job));
        let started = std::time::Instant::now();
        let captured = driftline_probe::capture(&endpoint, self.settings.capture_timeout).await;
        let seconds = started.elapsed().as_secs_f64();
        let _ = std::fs::remove_dir_all(&scratch);
        match captured {
            Ok((tools, surfaces)) => Ok(Captured { installed, tools, surfaces, seconds }),
            Err(err @ (ProbeError::Spawn(..) | ProbeError::Target(_))) => {
                Err(UpstreamError::Capture(err.to_string()))
            }
            Err(err) => Err(UpstreamError::Capture(format!(
                "{} started in the sandbox did not answer: {err}",
                package.pinned(version)
            ))),
        }
    }
}

/// The Python that makes virtualenvs: its real executable and prefix (a pyenv shim is a shell script that
/// would not run inside), asked of the interpreter itself; `python` as given when it cannot say.
async fn real_python(python: &str) -> (PathBuf, Option<PathBuf>) {
    let asked = tokio::process::Command::new(python)
        .args(["-c", "import sys; print(sys.executable); print(sys.base_prefix)"])
        .output()
        .await;
    if let Ok(output) = asked {
        let text = String::from_utf8_lossy(&output.stdout);
        let mut lines = text.lines();
        if let (true, Some(executable), Some(prefix)) = (output.status.success(), lines.next(), lines.next())
        {
            return (PathBuf::from(executable), Some(PathBuf::from(prefix)));
        }
    }
    (PathBuf::from(python), None)
}
