//! `[[upstream]]`: the packages whose releases driftline installs and captures in a sandbox before anyone
//! runs them, one entry per package and watched server; `[upstream_watcher]`: where and how.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{at_least, within, ConfigError};

/// One package followed for one server:
/// `[[upstream]] package = "npm:@modelcontextprotocol/server-filesystem", server = "files", command = ["mcp-server-filesystem", "/tmp"]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamEntry {
    /// `npm:NAME`, `npm:@SCOPE/NAME`, `pypi:NAME`, or `mcp-registry:NAMESPACE/NAME` (a server on the MCP
    /// Registry, followed to the npm or PyPI package its newest version names); no version: the watcher
    /// follows the newest.
    pub package: String,
    /// The server driftline watches (probed, or seen in traces) that runs this package.
    pub server: driftline_schemas::ServerName,
    /// The project of that server; default: `upstream_watcher.project`.
    #[serde(default)]
    pub project: Option<driftline_schemas::ProjectName>,
    /// The program and arguments that start the server (a bare program name is looked up among the
    /// package's own programs first); default: the package's own program, without arguments.
    #[serde(default)]
    pub command: Vec<String>,
    /// Environment variables of the server in the sandbox (nothing of driftline's is passed on).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Releases to follow, as a semver range (`^1.2`, `>=2, <3`); default: the registry's newest.
    #[serde(default)]
    pub versions: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamWatcherConfig {
    /// The project of entries that name none.
    pub project: driftline_schemas::ProjectName,
    /// Where releases are installed and the watcher keeps its state; default: `storage.data_dir/upstream`.
    pub cache_dir: Option<PathBuf>,
    pub npm_registry: String,
    /// PyPI's base address: `BASE/simple/` is the index, `BASE/pypi/NAME/json` the metadata.
    pub pypi_url: String,
    /// The MCP Registry's base address (`BASE/v0.1/servers/…`).
    pub mcp_registry: String,
    /// How often each package's document is asked for (with its ETag), per registry.
    pub npm_interval_seconds: u64,
    pub pypi_interval_seconds: u64,
    pub mcp_registry_interval_seconds: u64,
    /// The host's Python, which makes each PyPI release's virtualenv.
    pub python: String,
    pub install_timeout_seconds: u64,
    /// Starting a release's server in the sandbox and reading every list.
    pub capture_timeout_seconds: u64,
    /// Address space of each sandboxed process.
    pub memory_mb: u64,
    /// CPU seconds of each sandboxed process.
    pub cpu_seconds: u64,
}

impl Default for UpstreamWatcherConfig {
    fn default() -> Self {
        UpstreamWatcherConfig {
            project: driftline_schemas::ProjectName::default_project(),
            cache_dir: None,
            npm_registry: "https://registry.npmjs.org/".into(),
            pypi_url: "https://pypi.org/".into(),
            mcp_registry: "https://registry.modelcontextprotocol.io/".into(),
            npm_interval_seconds: 900,
            pypi_interval_seconds: 900,
            mcp_registry_interval_seconds: 900,
            python: "python3".into(),
            install_timeout_seconds: 300,
            capture_timeout_seconds: 60,
            memory_mb: 4096,
            cpu_seconds: 300,
        }
    }
}

fn with_slash(url: &str) -> String {
    if url.ends_with('/') {
        url.to_owned()
    } else {
        format!("{url}/")
    }
}

impl UpstreamWatcherConfig {
    pub fn validate(&self, entries: &[UpstreamEntry]) -> Result<(), ConfigError> {
        for (key, url) in [
            ("upstream_watcher.npm_registry", &self.npm_registry),
            ("upstream_watcher.pypi_url", &self.pypi_url),
            ("upstream_watcher.mcp_registry", &self.mcp_registry),
        ] {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                invalid!("{key} = {url:?} must be an http:// or https:// address");
            }
        }
        within("upstream_watcher.npm_interval_seconds", self.npm_interval_seconds, 1..=86_400)?;
        within("upstream_watcher.pypi_interval_seconds", self.pypi_interval_seconds, 1..=86_400)?;
        within(
            "upstream_watcher.mcp_registry_interval_seconds",
            self.mcp_registry_interval_seconds,
            1..=86_400,
        )?;
        within("upstream_watcher.install_timeout_seconds", self.install_timeout_seconds, 1..=3600)?;
        within("upstream_watcher.capture_timeout_seconds", self.capture_timeout_seconds, 1..=3600)?;
        within("upstream_watcher.memory_mb", self.memory_mb, 64..=1_048_576)?;
        at_least("upstream_watcher.cpu_seconds", self.cpu_seconds, 1)?;
        let mut seen = std::collections::HashSet::new();
        for (index, entry) in entries.iter().enumerate() {
            let package: driftline_upstream::Source = entry
                .package
                .parse()
                .map_err(|err| ConfigError::Invalid(format!("upstream[{index}].package: {err}")))?;
            if let Some(range) = &entry.versions {
                semver::VersionReq::parse(range).map_err(|err| {
                    ConfigError::Invalid(format!(
                        "upstream[{index}].versions = {range:?} is not a version range: {err}"
                    ))
                })?;
            }
            if entry.command.first().is_some_and(|program| program.trim().is_empty()) {
                invalid!("upstream[{index}].command must start with a program");
            }
            let has_nul = |s: &str| s.contains('\0');
            if entry.command.iter().any(|a| has_nul(a))
                || entry.env.iter().any(|(k, v)| has_nul(k) || has_nul(v))
            {
                invalid!("upstream[{index}]: command and env must not contain NUL characters");
            }
            if let Some(key) = entry.env.keys().find(|k| k.is_empty() || k.contains('=')) {
                invalid!("upstream[{index}].env: {key:?} is not a variable name");
            }
            let project = entry.project.as_ref().unwrap_or(&self.project);
            if !seen.insert((project.to_string(), entry.server.to_string(), package.to_string())) {
                invalid!(
                    "upstream[{index}]: {} is already watched for server {}",
                    entry.package,
                    entry.server
                );
            }
        }
        Ok(())
    }

    /// The watcher's settings and its checked entries (after `validate`).
    pub fn watch(
        &self,
        entries: &[UpstreamEntry],
        data_dir: &Path,
    ) -> Result<
        (driftline_upstream::watch::WatchSettings, Vec<driftline_upstream::watch::Watched>),
        ConfigError,
    > {
        use driftline_upstream::{Follow, Launch, Limits, Registries, UpstreamSettings};
        let upstream = UpstreamSettings {
            cache_dir: self.cache_dir.clone().unwrap_or_else(|| data_dir.join("upstream")),
            registries: Registries {
                npm: with_slash(&self.npm_registry),
                pypi: with_slash(&self.pypi_url),
                mcp: with_slash(&self.mcp_registry),
            },
            python: self.python.clone(),
            install_timeout: Duration::from_secs(self.install_timeout_seconds),
            capture_timeout: Duration::from_secs(self.capture_timeout_seconds),
            limits: Limits {
                memory_bytes: self.memory_mb << 20,
                cpu_seconds: self.cpu_seconds,
                ..Limits::default()
            },
        };
        let intervals = BTreeMap::from([
            ("npm", Duration::from_secs(self.npm_interval_seconds)),
            ("pypi", Duration::from_secs(self.pypi_interval_seconds)),
            ("mcp-registry", Duration::from_secs(self.mcp_registry_interval_seconds)),
        ]);
        let mut watched = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            let invalid = |what: String| ConfigError::Invalid(format!("upstream[{index}].{what}"));
            let source = entry.package.parse().map_err(|err| invalid(format!("package: {err}")))?;
            let range = entry
                .versions
                .as_deref()
                .map(semver::VersionReq::parse)
                .transpose()
                .map_err(|err| invalid(format!("versions: {err}")))?;
            watched.push(driftline_upstream::watch::Watched {
                project: entry.project.clone().unwrap_or_else(|| self.project.clone()),
                server: entry.server.clone(),
                source,
                follow: Follow { range },
                launch: Launch {
                    command: entry.command.clone(),
                    env: entry.env.clone(),
                    default_args: Vec::new(),
                },
            });
        }
        Ok((driftline_upstream::watch::WatchSettings { upstream, intervals }, watched))
    }
}
