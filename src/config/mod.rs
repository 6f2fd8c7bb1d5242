//! One typed configuration tree (DESIGN.md §10): defaults, then an optional `driftline.toml`, then
//! `DRIFTLINE__SECTION__KEY` environment variables. Unknown keys are an error; everything is validated
//! before anything starts, with a message that names the key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use driftline_detectors::tool_drift::BaselinePolicy;
use driftline_http::ApiKey;
use driftline_schemas::{DetectorThresholds, Secret, SecurityHold};
use serde::Deserialize;

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
}

/// The ClickHouse HTTP interface (`storage.store = "clickhouse"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClickHouseConfig {
    pub url: String,
    /// Created by `driftline migrate` when missing.
    pub database: String,
    pub user: Option<String>,
    /// Better from the environment: DRIFTLINE__CLICKHOUSE__PASSWORD.
    pub password: Option<Secret>,
}

impl Default for ClickHouseConfig {
    fn default() -> Self {
        ClickHouseConfig {
            url: "http://127.0.0.1:18123".into(),
            database: "driftline".into(),
            user: None,
            password: None,
        }
    }
}

impl ClickHouseConfig {
    pub fn settings(&self) -> driftline_store::ClickHouseSettings {
        driftline_store::ClickHouseSettings {
            url: self.url.clone(),
            database: self.database.clone(),
            user: present(&self.user).map(str::to_owned),
            password: Secret::present(&self.password).cloned(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// `host:port[,host:port…]`
    pub brokers: String,
    /// Topics are `<prefix>tool-lists`, `<prefix>spans`, `<prefix>commands`.
    pub topic_prefix: String,
    /// Partitions of each topic that `driftline topics create` (and `serve`) create.
    pub partitions: u32,
    pub replication: u32,
    /// A detector that stops heartbeating loses its partitions to the others after this long.
    pub session_timeout_ms: u32,
    /// Static group membership: a name unique per detector instance and stable across its restarts (a
    /// StatefulSet pod name), so a restarted detector takes its partitions back at once.
    pub instance_id: Option<String>,
    pub security_protocol: KafkaSecurity,
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512` (with `sasl_plaintext` / `sasl_ssl`).
    pub sasl_mechanism: Option<String>,
    pub sasl_username: Option<String>,
    /// Better from the environment: DRIFTLINE__KAFKA__SASL_PASSWORD.
    pub sasl_password: Option<Secret>,
    /// CA bundle for `ssl` / `sasl_ssl`; the system's roots when unset.
    pub ssl_ca_location: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KafkaSecurity {
    #[default]
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

/// Unset or empty (an optional Secret key rendered as "") is absent.
fn present(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|v| !v.is_empty())
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: "127.0.0.1:19092".into(),
            topic_prefix: "driftline.".into(),
            partitions: 4,
            replication: 1,
            session_timeout_ms: 10_000,
            instance_id: None,
            security_protocol: KafkaSecurity::Plaintext,
            sasl_mechanism: None,
            sasl_username: None,
            sasl_password: None,
            ssl_ca_location: None,
        }
    }
}

impl KafkaConfig {
    pub fn settings(&self) -> driftline_bus::KafkaSettings {
        driftline_bus::KafkaSettings {
            brokers: self.brokers.clone(),
            topic_prefix: self.topic_prefix.clone(),
            partitions: self.partitions,
            replication: self.replication,
            session_timeout_ms: self.session_timeout_ms,
            instance_id: present(&self.instance_id).map(str::to_owned),
            client_properties: self.client_properties(),
        }
    }

    /// librdkafka properties for the connection's security, shared by producer, consumer and admin client.
    fn client_properties(&self) -> Vec<(String, String)> {
        let protocol = match self.security_protocol {
            KafkaSecurity::Plaintext => "plaintext",
            KafkaSecurity::Ssl => "ssl",
            KafkaSecurity::SaslPlaintext => "sasl_plaintext",
            KafkaSecurity::SaslSsl => "sasl_ssl",
        };
        let mut properties = vec![("security.protocol".to_owned(), protocol.to_owned())];
        let mut add = |key: &str, value: Option<&str>| {
            if let Some(value) = value {
                properties.push((key.to_owned(), value.to_owned()));
            }
        };
        add("sasl.mechanisms", present(&self.sasl_mechanism));
        add("sasl.username", present(&self.sasl_username));
        add("sasl.password", Secret::present(&self.sasl_password).map(Secret::expose));
        add("ssl.ca.location", self.ssl_ca_location.as_deref().and_then(Path::to_str));
        properties
    }
}

/// Active probing of MCP servers (Streamable HTTP, SSE or stdio): their tool lists and whether they answer.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeConfig {
    /// The project probe results belong to.
    pub project: driftline_schemas::ProjectName,
    pub interval_seconds: u64,
    /// Connecting, and each complete tools/list, must finish within this; otherwise the server is DOWN.
    pub timeout_seconds: u64,
    /// `[[probe.servers]] name = "search-mcp", url = "http://…/mcp", headers = { Authorization = "Bearer …" }`,
    /// or `name = "files", command = "npx", args = ["-y", "@modelcontextprotocol/server-filesystem", "/data"]`.
    pub servers: Vec<driftline_probe::ProbeTarget>,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            project: driftline_schemas::ProjectName::default_project(),
            interval_seconds: 60,
            timeout_seconds: 10,
            servers: Vec::new(),
        }
    }
}

/// Webhooks told of every new drift event and every DOWN/UP transition (`serve`, or `driftline notify`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyConfig {
    /// The dashboard's address, for links in messages: `https://driftline.example.com`.
    pub public_url: Option<String>,
    /// `[[notify.webhooks]] url = "…", format = "json" | "slack", min_classification = "warning",
    /// secret = "…" (signs each body), projects = ["…"] (all when empty)`.
    pub webhooks: Vec<driftline_notify::Webhook>,
    /// More webhooks, as `[[webhooks]]` tables in a TOML file of their own (a mounted Kubernetes Secret:
    /// webhook URLs and secrets are credentials).
    pub webhooks_file: Option<PathBuf>,
    /// Notifications waiting per webhook; beyond it the oldest is dropped (counted and logged). [1, 100000]
    pub queue_capacity: usize,
    /// Attempts per notification (1 s, 2 s, 4 s … up to a minute apart) before it is given up. [1, 100]
    pub max_attempts: u32,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        let defaults = driftline_notify::NotifySettings::default();
        NotifyConfig {
            public_url: None,
            webhooks: Vec::new(),
            webhooks_file: None,
            queue_capacity: defaults.queue_capacity,
            max_attempts: defaults.max_attempts,
        }
    }
}

impl NotifyConfig {
    pub fn settings(&self) -> driftline_notify::NotifySettings {
        driftline_notify::NotifySettings {
            public_url: present(&self.public_url).map(str::to_owned),
            queue_capacity: self.queue_capacity,
            max_attempts: self.max_attempts,
            ..driftline_notify::NotifySettings::default()
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhooksFile {
    #[serde(default)]
    webhooks: Vec<driftline_notify::Webhook>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address of the one HTTP port (ingest, API). Without API keys it must be a loopback address.
    pub bind: String,
    /// Names clients may reach this server by (the `Host` header, without port), besides `localhost` and
    /// loopback addresses in local mode. Set, they are enforced with API keys too (421 for any other).
    pub allowed_hosts: Vec<String>,
    /// Connections open at once; further ones wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// A request's headers must arrive within this many seconds; a keep-alive connection idle this long
    /// is closed too.
    pub header_read_timeout_seconds: u64,
    /// A connection on which no byte moves either way for this many seconds is closed (a stalled upload,
    /// a client that does not read its answer).
    pub idle_timeout_seconds: u64,
    /// Connections one client address may hold at once; more are refused at accept (429).
    pub max_connections_per_peer: usize,
    /// Connections beyond `max_connections` kept for `/healthz`, `/readyz` and `/metrics` only.
    pub reserved_connections: usize,
    /// A request's whole body must arrive within this many seconds of its headers (408 otherwise).
    pub body_timeout_seconds: u64,
    /// After its first 5 seconds a body must have arrived at this average rate at least (408 otherwise).
    pub min_body_bytes_per_second: usize,
    /// Body bytes all requests together may hold at once; beyond it a request is 503 (retry).
    pub max_body_bytes_in_flight: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: "127.0.0.1:8000".into(),
            allowed_hosts: Vec::new(),
            max_connections: 1024,
            header_read_timeout_seconds: 10,
            idle_timeout_seconds: 60,
            max_connections_per_peer: 256,
            reserved_connections: 32,
            body_timeout_seconds: 60,
            min_body_bytes_per_second: 1024,
            max_body_bytes_in_flight: 256 * 1024 * 1024,
        }
    }
}

impl ServerConfig {
    pub fn connection_limits(&self) -> driftline_http::ConnectionLimits {
        driftline_http::ConnectionLimits {
            max_connections: self.max_connections,
            header_read_timeout: std::time::Duration::from_secs(self.header_read_timeout_seconds),
            idle_timeout: std::time::Duration::from_secs(self.idle_timeout_seconds),
            max_connections_per_peer: self.max_connections_per_peer,
            reserved_connections: self.reserved_connections,
        }
    }

    /// How request bodies are read; `max_bytes` is the largest any route takes (`limits.max_body_bytes`).
    pub fn body_limits(&self, max_bytes: usize) -> driftline_http::BodyLimits {
        driftline_http::BodyLimits {
            max_bytes,
            timeout: std::time::Duration::from_secs(self.body_timeout_seconds),
            min_bytes_per_second: self.min_body_bytes_per_second,
            max_bytes_in_flight: self.max_body_bytes_in_flight,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BusKind {
    /// A durable log in SQLite inside the process.
    #[default]
    Embedded,
    /// Apache Kafka (the `[kafka]` section).
    Kafka,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// SQLite in `storage.data_dir`.
    #[default]
    Sqlite,
    /// ClickHouse (the `[clickhouse]` section); tables from `driftline migrate`.
    Clickhouse,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    pub data_dir: PathBuf,
    pub bus: BusKind,
    pub store: StoreKind,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            data_dir: PathBuf::from("./driftline-data"),
            bus: BusKind::Embedded,
            store: StoreKind::Sqlite,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// `[[auth.keys]] project = "…", scopes = ["ingest", "read", "admin"], sha256 = "<hex of the key>"`.
    pub keys: Vec<ApiKey>,
    /// More keys, as `[[keys]]` tables in a TOML file of their own (a mounted Kubernetes Secret).
    pub keys_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    #[serde(default)]
    keys: Vec<ApiKey>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DetectorConfig {
    /// Defaults for projects that never changed their thresholds through the API.
    pub min_history_calls: u32,
    pub history_window: u32,
    pub tool_return_value_max_bytes: u32,
    /// Default for projects that never set theirs: `compatible` (a new tool list whose changes are all
    /// COMPATIBLE becomes the baseline at once), `manual` (an operator accepts each), or `auto`.
    pub baseline: BaselinePolicy,
    /// Default for projects that never set theirs: the least security-flag severity that holds a tool-list
    /// change for a person (`medium`, or `high`; never lower).
    pub security_hold: SecurityHold,
    /// Sessions at which an agent calling a tool with open breaking or warning drift is HIGH risk.
    pub high_risk_sessions: u64,
    /// A tool call sent again (same project, server, tool, trace and span id) within this many hours of
    /// the first is acknowledged and counted once. [1, 720]
    pub repeat_window_hours: u32,
    /// Memory for the identities of recent calls, where the detector remembers them (the ClickHouse store:
    /// at most 128 bytes a call); beyond it the oldest leave before their window ends, and a retry of one is
    /// counted again (`driftline_worker_repeat_identities_evicted_total`). [1048576, 1099511627776]
    pub repeat_memory_bytes: usize,
    /// Records the detector reads into one batch at most: a batch takes what the bus has ready, so under
    /// light load batches stay small (low latency) and on a backlog each store write carries many records.
    /// [1, 100000]
    pub max_batch_records: usize,
    /// Once a batch has processed for this long, the rest of its tool-list streams waits for the next one
    /// (calls and commands are always taken), so batches are stored, and lag gauges move, at least this
    /// often, and calls on other streams wait for no more list work than this. [10, 600000]
    pub max_batch_millis: u64,
    /// A tool without a call for this long (by the bus's clock) releases its detector state and its place
    /// in its project's limits; its next call starts a new baseline. [60, 31536000], 30 days by default.
    pub forget_unseen_tools_after_seconds: u64,
    /// For tests only: the detector pauses this long after each stored batch, to be slower than its
    /// input (the consumer-lag tests). 0 in any real deployment. [0, 10000]
    pub test_batch_pause_ms: u64,
    /// For tests only: the detector worker stops after this many batches, as a crashed one would (the
    /// process then reports not ready and exits non-zero). 0: never.
    pub test_stop_after_batches: u64,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        let t = DetectorThresholds::default();
        DetectorConfig {
            min_history_calls: t.min_history_calls,
            history_window: t.history_window,
            tool_return_value_max_bytes: t.tool_return_value_max_bytes,
            baseline: BaselinePolicy::default(),
            security_hold: SecurityHold::default(),
            high_risk_sessions: 10,
            repeat_window_hours: 24,
            repeat_memory_bytes: 256 << 20,
            max_batch_records: 20_000,
            forget_unseen_tools_after_seconds: 30 * 24 * 3600,
            max_batch_millis: 1000,
            test_batch_pause_ms: 0,
            test_stop_after_batches: 0,
        }
    }
}

impl DetectorConfig {
    pub fn thresholds(&self) -> DetectorThresholds {
        DetectorThresholds {
            min_history_calls: self.min_history_calls,
            history_window: self.history_window,
            tool_return_value_max_bytes: self.tool_return_value_max_bytes,
            baseline: self.baseline,
            security_hold: self.security_hold,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    pub max_body_bytes: usize,
    pub max_spans_per_batch: usize,
    /// Tools in one list (ingest 413; from Kafka a dead letter; from a probe a failed probe). [1, 1000000]
    pub max_tools_per_list: usize,
    /// Nesting of JSON values within one tool (400 / dead letter). [8, 128]
    pub max_schema_depth: usize,
    /// Schema nodes a list's `$ref`s may copy in when normalised, all tools together (413 / dead letter).
    /// [1000, 100000000]
    pub max_ref_expansion_nodes: usize,
    /// Bytes of tool-list text one project's servers may hold in a detector: baselines and newest lists
    /// (a list beyond it is a dead letter). [1048576, 1099511627776]
    pub max_tool_list_bytes_per_project: usize,
    /// Servers one project may hold detector state for, per detector process (a record adding one more is a
    /// dead letter). [1, 10000000]
    pub max_servers_per_project: usize,
    /// Tools one project may hold detector state for (return-shape windows), per detector process (a call
    /// of one more is a dead letter). [1, 100000000]
    pub max_tools_per_project: usize,
    /// Bytes of tool state (return-shape windows, contract checks) one project may hold per detector
    /// process, counting each tool at its worst case under the project's settings: fewer tools fit when a
    /// project admin raises `history_window` or `tool_return_value_max_bytes`, and a change that would put
    /// the tools held beyond it is refused. [1048576, 1099511627776]
    pub max_state_bytes_per_project: u64,
    /// Tool-list work one project may send through ingest per second, in bytes of schema the detector reads
    /// (a list's text, and 16 bytes per node its `$ref`s copy in); beyond it and the burst, a PUT is 429
    /// with Retry-After. Per ingest process. [1024, 1099511627776]
    pub tool_list_work_per_second: u64,
    /// What a project may send at once; at least one list of the largest cost the list limits allow.
    pub tool_list_work_burst: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let tool_lists = driftline_schemas::ToolListLimits::default();
        let keys = driftline_schemas::KeyLimits::default();
        LimitsConfig {
            max_body_bytes: 5 * 1024 * 1024,
            max_spans_per_batch: 1000,
            max_tools_per_list: tool_lists.max_tools,
            max_schema_depth: tool_lists.max_depth,
            max_ref_expansion_nodes: tool_lists.max_ref_nodes,
            max_tool_list_bytes_per_project: tool_lists.max_project_bytes,
            max_servers_per_project: keys.servers,
            max_tools_per_project: keys.tools,
            max_state_bytes_per_project: keys.state_bytes,
            tool_list_work_per_second: driftline_schemas::ListWorkLimits::default().per_second,
            tool_list_work_burst: driftline_schemas::ListWorkLimits::default().burst,
        }
    }
}

impl LimitsConfig {
    pub fn keys(&self) -> driftline_schemas::KeyLimits {
        driftline_schemas::KeyLimits {
            servers: self.max_servers_per_project,
            tools: self.max_tools_per_project,
            state_bytes: self.max_state_bytes_per_project,
        }
    }

    pub fn list_work(&self) -> driftline_schemas::ListWorkLimits {
        driftline_schemas::ListWorkLimits {
            per_second: self.tool_list_work_per_second,
            burst: self.tool_list_work_burst,
        }
    }

    pub fn tool_lists(&self) -> driftline_schemas::ToolListLimits {
        driftline_schemas::ToolListLimits {
            max_tools: self.max_tools_per_list,
            max_depth: self.max_schema_depth,
            max_ref_nodes: self.max_ref_expansion_nodes,
            max_project_bytes: self.max_tool_list_bytes_per_project,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub format: LogFormat,
    /// A tracing filter: `info`, `driftline_worker=debug,info`, …
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { format: LogFormat::Text, level: "info".into() }
    }
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

impl ServerConfig {
    /// Checks the section; the error names the key.
    pub fn validate(&self, limits: &LimitsConfig) -> anyhow::Result<()> {
        for (index, host) in self.allowed_hosts.iter().enumerate() {
            let valid = !host.is_empty()
                && host.len() <= 253
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']' | b':'));
            if !valid {
                bail!("server.allowed_hosts[{index}] = {host:?}: a host name or address without port");
            }
        }
        if !(1..=1_000_000).contains(&self.max_connections) {
            bail!("server.max_connections = {} must be in [1, 1000000]", self.max_connections);
        }
        // Above `max_connections` it simply does not bind.
        if self.max_connections_per_peer == 0 {
            bail!("server.max_connections_per_peer must be at least 1");
        }
        if !(1..=1_024).contains(&self.reserved_connections) {
            bail!("server.reserved_connections = {} must be in [1, 1024]", self.reserved_connections);
        }
        if self.min_body_bytes_per_second > 1024 * 1024 {
            bail!(
                "server.min_body_bytes_per_second = {} must be at most 1048576",
                self.min_body_bytes_per_second
            );
        }
        if self.max_body_bytes_in_flight < limits.max_body_bytes {
            bail!(
                "server.max_body_bytes_in_flight = {} must be at least limits.max_body_bytes = {}",
                self.max_body_bytes_in_flight,
                limits.max_body_bytes
            );
        }
        for (key, value) in [
            ("server.header_read_timeout_seconds", self.header_read_timeout_seconds),
            ("server.idle_timeout_seconds", self.idle_timeout_seconds),
            ("server.body_timeout_seconds", self.body_timeout_seconds),
        ] {
            if !(1..=3_600).contains(&value) {
                bail!("{key} = {value} must be in [1, 3600]");
            }
        }
        Ok(())
    }
}

impl AuthConfig {
    /// Checks the section; the error names the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        for (index, key) in self.keys.iter().enumerate() {
            if key.sha256.len() != 64 || !key.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!("auth.keys[{index}].sha256 must be 64 hex digits (the SHA-256 of the key)");
            }
            if key.scopes.is_empty() {
                bail!("auth.keys[{index}] needs at least one scope");
            }
        }
        Ok(())
    }
}

impl DetectorConfig {
    /// Checks the section; the error names the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.thresholds().validate().map_err(|err| anyhow::anyhow!("detector.{err}"))?;
        if !(1..=720).contains(&self.repeat_window_hours) {
            bail!(
                "detector.repeat_window_hours = {} is out of bounds: it must be in [1, 720]",
                self.repeat_window_hours
            );
        }
        if !(1 << 20..=1 << 40).contains(&self.repeat_memory_bytes) {
            bail!(
                "detector.repeat_memory_bytes = {} is out of bounds: it must be in [1048576, 1099511627776]",
                self.repeat_memory_bytes
            );
        }
        if !(10..=600_000).contains(&self.max_batch_millis) {
            bail!(
                "detector.max_batch_millis = {} is out of bounds: it must be in [10, 600000]",
                self.max_batch_millis
            );
        }
        if !(60..=31_536_000).contains(&self.forget_unseen_tools_after_seconds) {
            bail!(
                "detector.forget_unseen_tools_after_seconds = {} is out of bounds: it must be in [60, 31536000]",
                self.forget_unseen_tools_after_seconds
            );
        }
        if !(1..=100_000).contains(&self.max_batch_records) {
            bail!(
                "detector.max_batch_records = {} is out of bounds: it must be in [1, 100000]",
                self.max_batch_records
            );
        }
        if self.test_batch_pause_ms > 10_000 {
            bail!("detector.test_batch_pause_ms must be in [0, 10000]");
        }
        Ok(())
    }
}

impl KafkaConfig {
    /// Checks the section; the error names the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.partitions == 0 || self.partitions > 65_536 || self.replication == 0 {
            bail!("kafka.partitions must be in [1, 65536] and kafka.replication at least 1");
        }
        if let Some(mechanism) = present(&self.sasl_mechanism) {
            if !["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"].contains(&mechanism) {
                bail!("kafka.sasl_mechanism = {mechanism:?}: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512");
            }
        }
        let sasl = matches!(self.security_protocol, KafkaSecurity::SaslPlaintext | KafkaSecurity::SaslSsl);
        if sasl && (present(&self.sasl_mechanism).is_none() || present(&self.sasl_username).is_none()) {
            bail!("kafka.security_protocol = sasl_*: set kafka.sasl_mechanism and kafka.sasl_username (and the password)");
        }
        if !(6_000..=300_000).contains(&self.session_timeout_ms) {
            bail!("kafka.session_timeout_ms must be in [6000, 300000] (the broker's default group limits)");
        }
        Ok(())
    }
}

impl ClickHouseConfig {
    /// Checks the section; the error names the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            bail!("clickhouse.url = {:?} must be an http:// or https:// address", self.url);
        }
        if self.database.is_empty() || !self.database.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            bail!("clickhouse.database = {:?}: use letters, digits and _", self.database);
        }
        Ok(())
    }
}

impl ProbeConfig {
    /// Checks the section; the error names the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.interval_seconds == 0 || self.timeout_seconds == 0 {
            bail!("probe.interval_seconds and probe.timeout_seconds must be at least 1");
        }
        for (index, target) in self.servers.iter().enumerate() {
            if let Err(reason) = target.endpoint() {
                bail!("probe.servers[{index}] ({}): {reason}", target.name);
            }
        }
        let mut names = std::collections::HashSet::new();
        if let Some(target) = self.servers.iter().find(|t| !names.insert(t.name.as_str())) {
            bail!("probe.servers: the name {:?} is used twice", target.name);
        }
        Ok(())
    }
}

impl NotifyConfig {
    /// Checks the section; the error names the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        for (index, webhook) in self.webhooks.iter().enumerate() {
            if let Err(reason) = webhook.check() {
                bail!("notify.webhooks[{index}]: {reason}");
            }
        }
        if let Some(url) = present(&self.public_url) {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                bail!("notify.public_url = {url:?} must be an http:// or https:// address");
            }
        }
        if !(1..=100_000).contains(&self.queue_capacity) || !(1..=100).contains(&self.max_attempts) {
            bail!("notify.queue_capacity must be in [1, 100000] and notify.max_attempts in [1, 100]");
        }
        Ok(())
    }
}

impl LimitsConfig {
    /// Checks the section; the error names the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        if !(1..=1_000_000).contains(&self.max_tools_per_list) {
            bail!("limits.max_tools_per_list = {} must be in [1, 1000000]", self.max_tools_per_list);
        }
        if !(8..=128).contains(&self.max_schema_depth) {
            bail!("limits.max_schema_depth = {} must be in [8, 128]", self.max_schema_depth);
        }
        if !(1_000..=100_000_000).contains(&self.max_ref_expansion_nodes) {
            bail!(
                "limits.max_ref_expansion_nodes = {} must be in [1000, 100000000]",
                self.max_ref_expansion_nodes
            );
        }
        if !(1 << 20..=1 << 40).contains(&self.max_tool_list_bytes_per_project) {
            bail!(
                "limits.max_tool_list_bytes_per_project = {} must be in [1048576, 1099511627776]",
                self.max_tool_list_bytes_per_project
            );
        }
        if !(1..=10_000_000).contains(&self.max_servers_per_project) {
            bail!(
                "limits.max_servers_per_project = {} must be in [1, 10000000]",
                self.max_servers_per_project
            );
        }
        if !(1..=100_000_000).contains(&self.max_tools_per_project) {
            bail!("limits.max_tools_per_project = {} must be in [1, 100000000]", self.max_tools_per_project);
        }
        if !(1 << 20..=1 << 40).contains(&self.max_state_bytes_per_project) {
            bail!(
                "limits.max_state_bytes_per_project = {} must be in [1048576, 1099511627776]",
                self.max_state_bytes_per_project
            );
        }
        if !(1024..=1 << 40).contains(&self.tool_list_work_per_second) {
            bail!(
                "limits.tool_list_work_per_second = {} must be in [1024, 1099511627776]",
                self.tool_list_work_per_second
            );
        }
        // A full bucket must let the costliest list the limits allow through.
        let costliest =
            driftline_detectors::tool_drift::list_work(self.max_body_bytes, self.max_ref_expansion_nodes);
        if self.tool_list_work_burst < costliest {
            bail!(
                "limits.tool_list_work_burst = {} is less than the costliest list the limits allow ({costliest}: limits.max_body_bytes = {} and 16 bytes for each of limits.max_ref_expansion_nodes = {})",
                self.tool_list_work_burst,
                self.max_body_bytes,
                self.max_ref_expansion_nodes
            );
        }
        Ok(())
    }
}

impl Config {
    /// Reads a configuration from TOML text alone: no environment, and `keys_file` / `webhooks_file` are
    /// not read. Validated like [`Config::load`] (the fuzz target reads configurations this way).
    #[allow(dead_code)] // the binary reads files with `load`; fuzz/fuzz_targets/config.rs calls this
    pub fn from_toml(text: &str) -> anyhow::Result<Config> {
        let config: Config = config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .build()
            .context("cannot read the configuration")?
            .try_deserialize()
            .map_err(|err| anyhow::anyhow!("invalid configuration: {}", describe(err)))?;
        config.validate()?;
        Ok(config)
    }

    /// Reads the defaults, the optional file and `DRIFTLINE__…` variables; every error names its key.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Config> {
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
            .context("cannot read the configuration")?
            .try_deserialize()
            .map_err(|err| anyhow::anyhow!("invalid configuration: {}", describe(err)))?;
        let mut config = config;
        if let Some(path) = config.auth.keys_file.clone() {
            let file: KeysFile = config::Config::builder()
                .add_source(
                    config::File::from(path.as_path()).format(config::FileFormat::Toml).required(true),
                )
                .build()
                .and_then(|c| c.try_deserialize())
                .map_err(|err| anyhow::anyhow!("auth.keys_file = {}: {}", path.display(), describe(err)))?;
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
                    anyhow::anyhow!("notify.webhooks_file = {}: {}", path.display(), describe(err))
                })?;
            config.notify.webhooks.extend(file.webhooks);
        }
        config.validate()?;
        Ok(config)
    }

    /// Whether a process that serves project data may listen on `server.bind`: beyond loopback only with
    /// API keys. A detector serves only health and metrics, so it may listen anywhere.
    pub fn check_listener(&self, serves_data: bool) -> anyhow::Result<()> {
        let bind = self.bind_address()?;
        if serves_data && self.auth.keys.is_empty() && !bind.ip().is_loopback() {
            bail!(
                "server.bind = {bind} is not a loopback address and no API keys are configured: \
                 add [[auth.keys]] (or auth.keys_file) or bind 127.0.0.1"
            );
        }
        Ok(())
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        self.bind_address()?;
        self.server.validate(&self.limits)?;
        self.auth.validate()?;
        self.detector.validate()?;
        self.kafka.validate()?;
        self.clickhouse.validate()?;
        self.probe.validate()?;
        self.notify.validate()?;
        self.limits.validate()?;
        let per_tool = driftline_detectors::tool_state_worst_case_bytes(&self.detector.thresholds());
        if self.limits.max_state_bytes_per_project < per_tool {
            bail!(
                "limits.max_state_bytes_per_project = {} holds no tool: one tool may hold up to {per_tool} bytes at detector.history_window = {} and detector.tool_return_value_max_bytes = {}",
                self.limits.max_state_bytes_per_project,
                self.detector.history_window,
                self.detector.tool_return_value_max_bytes
            );
        }
        if self.limits.max_spans_per_batch == 0 || self.limits.max_body_bytes == 0 {
            bail!("limits.max_spans_per_batch and limits.max_body_bytes must be at least 1");
        }
        Ok(())
    }

    pub fn bind_address(&self) -> anyhow::Result<SocketAddr> {
        self.server.bind.parse().with_context(|| {
            format!("server.bind = {:?} is not an address like 127.0.0.1:8000", self.server.bind)
        })
    }
}

#[cfg(test)]
mod tests;
