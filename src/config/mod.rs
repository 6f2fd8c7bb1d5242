//! One typed configuration tree (DESIGN.md §10): defaults, then an optional `driftline.toml`, then
//! `DRIFTLINE__SECTION__KEY` environment variables. Unknown keys are an error; everything is validated
//! before anything starts, with a message that names the key.

/// Refuses the configuration with a message that names the key.
macro_rules! invalid {
    ($($message:tt)*) => {
        return Err($crate::config::ConfigError::Invalid(format!($($message)*)))
    };
}

mod auth;
mod clickhouse;
mod detector;
mod kafka;
mod limits;
mod log;
mod notify;
mod otlp;
mod probe;
mod server;
mod storage;
mod upstream;

use std::fmt::Display;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::Path;

use serde::Deserialize;

use auth::KeysFile;
use notify::WebhooksFile;

pub use auth::AuthConfig;
pub use clickhouse::ClickHouseConfig;
pub use detector::DetectorConfig;
pub use kafka::KafkaConfig;
pub use limits::LimitsConfig;
pub use log::{LogConfig, LogFormat};
pub use notify::NotifyConfig;
pub use otlp::{GrpcListen, OtlpConfig, OtlpServer};
pub use probe::ProbeConfig;
pub use server::ServerConfig;
pub use storage::{BusKind, StorageConfig, StoreKind};
pub use upstream::{UpstreamEntry, UpstreamWatcherConfig};

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub storage: StorageConfig,
    pub auth: AuthConfig,
    pub detector: DetectorConfig,
    pub limits: LimitsConfig,
    pub log: LogConfig,
    pub probe: ProbeConfig,
    pub notify: NotifyConfig,
    pub kafka: KafkaConfig,
    pub clickhouse: ClickHouseConfig,
    pub otlp: OtlpConfig,
    /// `[[upstream]]`: packages whose releases are captured in a sandbox before they run.
    pub upstream: Vec<UpstreamEntry>,
    pub upstream_watcher: UpstreamWatcherConfig,
}

/// Unset or empty (an optional Secret key rendered as "") is absent.
fn present(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|v| !v.is_empty())
}

/// A configuration error as `key: problem`. The `config` crate writes a key below a list without the
/// dot (`auth.keys[0]project`), and after the problem; people read the key first.
fn describe(err: config::ConfigError) -> String {
    match err {
        config::ConfigError::At { error, key: Some(key), .. } => {
            let mut fixed = String::with_capacity(key.len() + 2);
            let mut after_index = false;
            for c in key.chars() {
                if after_index && c != '[' && c != '.' {
                    fixed.push('.');
                }
                after_index = c == ']';
                fixed.push(c);
            }
            format!("{fixed}: {error}")
        }
        other => other.to_string(),
    }
}

impl Config {
    /// Reads a configuration from TOML text alone: no environment, and `keys_file` / `webhooks_file` are
    /// not read. Validated like [`Config::load`] (the fuzz target reads configurations this way).
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let config: Config = config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .build()
            .map_err(|err| ConfigError::Unreadable(err.to_string()))?
            .try_deserialize()
            .map_err(|err| ConfigError::Invalid(format!("invalid configuration: {}", describe(err))))?;
        config.validate()?;
        Ok(config)
    }

    /// Reads the defaults, the optional file and `DRIFTLINE__…` variables; every error names its key.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let mut builder = config::Config::builder();
        match file {
            Some(path) => builder = builder.add_source(config::File::from(path).required(true)),
            None => builder = builder.add_source(config::File::with_name("driftline.toml").required(false)),
        }
        builder = builder.add_source(
            config::Environment::with_prefix("DRIFTLINE")
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true),
        );
        let config: Config = builder
            .build()
            .map_err(|err| ConfigError::Unreadable(err.to_string()))?
            .try_deserialize()
            .map_err(|err| ConfigError::Invalid(format!("invalid configuration: {}", describe(err))))?;
        let mut config = config;
        if let Some(path) = config.auth.keys_file.clone() {
            let file: KeysFile = config::Config::builder()
                .add_source(
                    config::File::from(path.as_path()).format(config::FileFormat::Toml).required(true),
                )
                .build()
                .and_then(|c| c.try_deserialize())
                .map_err(|err| {
                    ConfigError::Invalid(format!("auth.keys_file = {}: {}", path.display(), describe(err)))
                })?;
            config.auth.keys.extend(file.keys);
        }
        if let Some(path) = config.notify.webhooks_file.clone() {
            let file: WebhooksFile = config::Config::builder()
                .add_source(
                    config::File::from(path.as_path()).format(config::FileFormat::Toml).required(true),
                )
                .build()
                .and_then(|c| c.try_deserialize())
                .map_err(|err| {
                    ConfigError::Invalid(format!(
                        "notify.webhooks_file = {}: {}",
                        path.display(),
                        describe(err)
                    ))
                })?;
            config.notify.webhooks.extend(file.webhooks);
        }
        config.validate()?;
        Ok(config)
    }

    /// Whether a process that serves project data may listen on `server.bind`: beyond loopback only with
    /// API keys. A detector serves only health and metrics, so it may listen anywhere.
    pub fn check_listener(&self, serves_data: bool) -> Result<(), ConfigError> {
        let bind = self.bind_address()?;
        if serves_data && self.auth.keys.is_empty() && !bind.ip().is_loopback() {
            invalid!(
                "server.bind = {bind} is not a loopback address and no API keys are configured: \
                 add [[auth.keys]] (or auth.keys_file) or bind 127.0.0.1"
            );
        }
        if let GrpcListen::Required(grpc) = self.otlp.grpc_listen()? {
            if serves_data && self.auth.keys.is_empty() && !grpc.ip().is_loopback() {
                invalid!(
                    "otlp.grpc_bind = {grpc} is not a loopback address and no API keys are configured: \
                     add [[auth.keys]] (or auth.keys_file) or bind 127.0.0.1"
                );
            }
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.bind_address()?;
        self.server.validate(&self.limits)?;
        self.auth.validate()?;
        self.detector.validate()?;
        self.kafka.validate()?;
        self.clickhouse.validate()?;
        self.probe.validate()?;
        self.notify.validate()?;
        self.otlp.validate()?;
        self.upstream_watcher.validate(&self.upstream)?;
        self.limits.validate()?;
        let per_tool = driftline_detectors::tool_state_worst_case_bytes(&self.detector.thresholds());
        if self.limits.max_state_bytes_per_project < per_tool {
            invalid!(
                "limits.max_state_bytes_per_project = {} holds no tool: one tool may hold up to {per_tool} bytes at detector.history_window = {} and detector.tool_return_value_max_bytes = {}",
                self.limits.max_state_bytes_per_project,
                self.detector.history_window,
                self.detector.tool_return_value_max_bytes
            );
        }
        Ok(())
    }

    pub fn bind_address(&self) -> Result<SocketAddr, ConfigError> {
        self.server.bind.parse().map_err(|err| {
            ConfigError::Invalid(format!(
                "server.bind = {:?} is not an address like 127.0.0.1:8000: {err}",
                self.server.bind
            ))
        })
    }
}

/// Why a configuration cannot be used. Every message names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the configuration: {0}")]
    Unreadable(String),
    #[error("{key} = {value} is out of bounds: it must be in [{min}, {max}]")]
    OutOfBounds { key: &'static str, value: String, min: String, max: String },
    #[error("{0}")]
    Invalid(String),
}

/// Checks a key against its range. The range is written once, here at the call: the check and the
/// message both come from it.
fn within<T: PartialOrd + Display>(
    key: &'static str,
    value: T,
    range: RangeInclusive<T>,
) -> Result<(), ConfigError> {
    if range.contains(&value) {
        return Ok(());
    }
    let (min, max) = range.into_inner();
    Err(ConfigError::OutOfBounds {
        key,
        value: value.to_string(),
        min: min.to_string(),
        max: max.to_string(),
    })
}

/// Checks a key that has a floor and no ceiling of its own.
fn at_least<T: PartialOrd + Display>(key: &'static str, value: T, min: T) -> Result<(), ConfigError> {
    if value >= min {
        return Ok(());
    }
    Err(ConfigError::Invalid(format!("{key} = {value} must be at least {min}")))
}

#[cfg(test)]
mod tests;
