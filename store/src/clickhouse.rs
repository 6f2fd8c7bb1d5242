//! The production store: ClickHouse over HTTP (the `clickhouse` crate), tables from `schemas/clickhouse/`.
//!
//! A batch is written in three steps: every output but the traffic (one insert per table, at once), then
//! the traffic (rollups and call rows, at once), and `detector_state` (state + positions, one insert, so
//! one part) last. Every output row has a deterministic sort key and the tables are ReplacingMergeTree
//! read with FINAL, so re-writing a batch after a failure or crash changes nothing a query sees.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use clickhouse::{Client, Row};
use driftline_schemas::api::{
    CallBucket, DeadLetterCount, DriftImpact, RecentCall, ReturnValueStats, ServerHealth, SignalGroup,
    ToolSchema, ToolShape, ToolSummary,
};
use driftline_schemas::{
    DetectorThresholds, EventStatus, InputPosition, Notification, SchemaDriftEvent, ServerStatus,
    ServerSurfaces, ShapeDriftSignal, Timestamp, ToolKey,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::retention;
use crate::rollup::{self, Rollup, RollupKey};
use crate::views::{self, ms, name, parse_name, since, text, timestamp};
use crate::{
    Batch, BucketQuery, DetectorState, DetectorStore, Forgotten, ImpactQuery, NotificationStore, QueryStore,
    Resume, StoreError, StoredToolList, Streams,
};

/// Migrations in order; the version is the position (1-based).
const MIGRATIONS: &[&str] = &[
    include_str!("../../schemas/clickhouse/0001_init.sql"),
    include_str!("../../schemas/clickhouse/0002_call_identities.sql"),
    include_str!("../../schemas/clickhouse/0003_notifications.sql"),
    include_str!("../../schemas/clickhouse/0004_rollups.sql"),
    include_str!("../../schemas/clickhouse/0005_surfaces.sql"),
    include_str!("../../schemas/clickhouse/0006_call_identities_by_stream.sql"),
];
const CONSUMER: &str = "detectors";
const POSITION: &str = "position";

/// Where the ClickHouse HTTP interface is and which database holds driftline's tables.
#[derive(Debug, Clone)]
pub struct ClickHouseSettings {
    pub url: String,
    pub database: String,
    pub user: Option<String>,
    pub password: Option<String>,
}

#[derive(Clone)]
pub struct ClickHouseStore {
    client: Client,
}

impl From<clickhouse::error::Error> for StoreError {
    fn from(err: clickhouse::error::Error) -> Self {
        use clickhouse::error::Error;
        match err {
            Error::Network(_) | Error::TimedOut => StoreError::Unavailable(err.to_string()),
            Error::BadResponse(ref text) if text.contains("Code: 60.") || text.contains("Code: 81.") => {
                StoreError::Unavailable(format!("{err} (run `driftline migrate`)"))
            }
            other => StoreError::ClickHouse(other.to_string()),
        }
    }
}

/// The HTTP client under the `clickhouse` crate's, as the crate builds its own (keep-alive, idle pooled
/// connections dropped before ClickHouse's 3 s, http and https) but with TCP_NODELAY: without it every
/// request waits for the server's delayed ACK of its first segment, ≈ 40 ms per query or insert on Linux
/// (`SELECT 1` took 48 ms; a detector batch is a dozen inserts).
fn http_client() -> Result<Client, StoreError> {
    use hyper_util::client::legacy::{connect::HttpConnector, Client as HyperClient};
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_keepalive(Some(Duration::from_secs(60)));
    connector.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
        .map_err(|err| StoreError::Unavailable(format!("tls for clickhouse: {err}")))?
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector);
    let hyper = HyperClient::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(2))
        .build(connector);
    Ok(Client::with_http_client(hyper))
}

fn client(settings: &ClickHouseSettings) -> Result<Client, StoreError> {
    let mut client = http_client()?.with_url(&settings.url);
    if let Some(user) = &settings.user {
        client = client.with_user(user);
    }
    if let Some(password) = &settings.password {
        client = client.with_password(password);
    }
    Ok(client)
}

/// Creates the database and applies every migration not yet recorded; returns the versions applied now.
pub async fn migrate(settings: &ClickHouseSettings) -> Result<Vec<u32>, StoreError> {
    let root = client(settings)?;
    root.query(&format!("CREATE DATABASE IF NOT EXISTS `{}`", settings.database)).execute().await?;
    let client = root.with_database(&settings.database);
    client
        .query(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version UInt32, applied_at DateTime64(3, 'UTC'))
             ENGINE = ReplacingMergeTree ORDER BY version",
        )
        .execute()
        .await?;
    let applied: Vec<u32> = client.query("SELECT version FROM schema_migrations FINAL").fetch_all().await?;
    let mut now_applied = Vec::new();
    for (index, sql) in MIGRATIONS.iter().enumerate() {
        let version = index as u32 + 1;
        if applied.contains(&version) {
            continue;
        }
        // Statements are idempotent, so a migration interrupted half way is simply applied again.
        for statement in statements(sql) {
            client.query(&statement).execute().await?;
        }
        client
            .query("INSERT INTO schema_migrations (version, applied_at) VALUES (?, now64(3))")
            .bind(version)
            .execute()
            .await?;
        now_applied.push(version);
    }
    Ok(now_applied)
}

/// The statements of a migration file: `;` at a line end separates them; `--` comment lines are dropped.
fn statements(sql: &str) -> Vec<String> {
    let without_comments: String = sql
        .lines()
        .map(|line| match line.find("--") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n");
    without_comments.split(";\n").map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

#[derive(Row, Serialize)]
struct NotificationRow {
    id: String,
    project: String,
    server_name: String,
    kind: String,
    /// DateTime64(3): milliseconds.
    at: i64,
    body: String,
}

#[derive(Row, Serialize)]
struct NotifiedRow {
    webhook: String,
    id: String,
    outcome: String,
    sent_at: i64,
}

#[derive(Row, Serialize, Deserialize)]
struct CallIdentityRow {
    identity: String,
    partition: u32,
    offset: u64,
    /// DateTime64(3): milliseconds.
    ingested_at: i64,
}

#[derive(Row, Serialize, Deserialize)]
struct EventRow {
    project: String,
    server_name: String,
    id: String,
    detected_at: i64,
    previous_hash: String,
    current_hash: String,
    changes: String,
    status: String,
    max_classification: Option<String>,
    max_severity: Option<String>,
    accepted_by: Option<String>,
    accepted_at: Option<i64>,
    event: String,
}

impl EventRow {
    fn new(event: &SchemaDriftEvent) -> Result<Self, StoreError> {
        Ok(EventRow {
            project: event.project.clone(),
            server_name: event.server_name.clone(),
            id: event.id.clone(),
            detected_at: ms(event.detected_at),
            previous_hash: event.previous_hash.clone(),
            current_hash: event.current_hash.clone(),
            changes: text(&event.changes)?,
            status: name(&event.status)?,
            max_classification: event.max_classification.map(|c| c.as_str().to_owned()),
            max_severity: event.max_severity.map(|s| s.as_str().to_owned()),
            accepted_by: event.accepted_by.clone(),
            accepted_at: event.accepted_at.map(ms),
            event: text(event)?,
        })
    }

    /// The event with its lifecycle columns (updated after detection) applied.
    fn into_event(self) -> Result<SchemaDriftEvent, StoreError> {
        let mut event: SchemaDriftEvent = serde_json::from_str(&self.event)?;
        event.status = parse_name(&self.status)?;
        event.accepted_by = self.accepted_by;
        event.accepted_at = self.accepted_at.map(timestamp).transpose()?;
        Ok(event)
    }
}

#[derive(Row, Serialize)]
struct AcceptanceRow {
    project: String,
    server_name: String,
    id: String,
    previous_hash: String,
    new_hash: String,
    accepted_by: String,
    accepted_at: i64,
    event_ids: String,
}

#[derive(Row, Serialize, Deserialize)]
struct ServerRowDb {
    project: String,
    server_name: String,
    status: String,
    schema_hash: Option<String>,
    tool_count: u32,
    last_seen: Option<i64>,
    note: Option<String>,
    latency_ms: Option<f64>,
}

#[derive(Row, Serialize)]
struct SnapshotRow {
    project: String,
    server_name: String,
    schema_hash: String,
    captured_at: i64,
    tools: String,
    surfaces: Option<String>,
}

#[derive(Row, Serialize, Deserialize)]
struct ToolSchemaRow {
    project: String,
    server_name: String,
    schema_hash: String,
    tool_name: String,
    description: Option<String>,
    input_schema: String,
    captured_at: i64,
}

#[derive(Row, Serialize)]
struct CallRow {
    project: String,
    server: String,
    tool: String,
    ingested_at: i64,
    id: String,
    span_id: String,
    session_id: Option<String>,
    agent_name: Option<String>,
    started_at: i64,
    duration_ms: f64,
    status: String,
    error: Option<String>,
    shape_outcome: String,
    shape_hash: Option<String>,
    compact_bytes: Option<u64>,
}

#[derive(Row, Serialize)]
struct SignalRow {
    project: String,
    server: String,
    tool: String,
    id: String,
    detected_at: i64,
    shape_hash: String,
    signal: String,
}

#[derive(Row, Serialize)]
struct ToolShapeDb {
    project: String,
    server: String,
    tool: String,
    shape: String,
}

#[derive(Row, Serialize, Deserialize)]
struct SettingRow {
    project: String,
    thresholds: String,
}

#[derive(Row, Serialize)]
struct CommandRow {
    id: String,
    applied_at: i64,
    result: String,
}

#[derive(Row, Serialize, Deserialize)]
struct StateRow {
    consumer: String,
    kind: String,
    key: String,
    stream: u32,
    state: String,
}

#[derive(Row, Serialize, Deserialize)]
struct ToolRollupRow {
    project: String,
    server: String,
    tool: String,
    bucket_seconds: u32,
    bucket_ms: i64,
    through_partition: u32,
    through_offset: u64,
    calls: u64,
    errors: u64,
    duration_sum: f64,
    last_call_ms: i64,
    fingerprinted: u64,
    oversized: u64,
    truncated_sentinel: u64,
    unparseable: u64,
    too_deep: u64,
    absent: u64,
    not_success: u64,
    #[serde(with = "serde_bytes")]
    latency: Vec<u8>,
    #[serde(with = "serde_bytes")]
    shapes: Vec<u8>,
}

#[derive(Row, Serialize, Deserialize)]
struct AgentRollupRow {
    project: String,
    server: String,
    tool: String,
    bucket_seconds: u32,
    bucket_ms: i64,
    agent: String,
    through_partition: u32,
    through_offset: u64,
    calls: u64,
    errors: u64,
    duration_sum: f64,
    last_call_ms: i64,
    #[serde(with = "serde_bytes")]
    sessions: Vec<u8>,
}

/// A stored call as the drill-down lists it.
#[derive(Row, Deserialize)]
struct RecentCallRow {
    span_id: String,
    session_id: Option<String>,
    agent_name: Option<String>,
    started_at: i64,
    ingested_at: i64,
    duration_ms: f64,
    status: String,
    error: Option<String>,
    shape_outcome: String,
    shape_hash: Option<String>,
    compact_bytes: Option<u64>,
}

/// What a rollup keeps of a stored call (rebuilding rollups over calls stored before they existed).
#[derive(Row, Deserialize)]
struct StoredCallRow {
    agent_name: Option<String>,
    session_id: Option<String>,
    started_at: i64,
    ingested_at: i64,
    duration_ms: f64,
    status: String,
    shape_outcome: String,
    shape_hash: Option<String>,
}

/// What the rollup rows a detector asks for have in common, to read them in one range.
struct RollupScope<'a> {
    tools: BTreeSet<(&'a str, &'a str)>,
    agents: BTreeSet<&'a str>,
    from_ms: i64,
    to_ms: i64,
}

impl Default for RollupScope<'_> {
    fn default() -> Self {
        RollupScope { tools: BTreeSet::new(), agents: BTreeSet::new(), from_ms: i64::MAX, to_ms: i64::MIN }
    }
}

/// An agent row as drift impact reads it.
#[derive(Row, Deserialize)]
struct AgentWindowRow {
    agent: String,
    calls: u64,
    errors: u64,
    duration_sum: f64,
    last_call_ms: i64,
    #[serde(with = "serde_bytes")]
    sessions: Vec<u8>,
}

/// A tool row as a timeline reads it.
#[derive(Row, Deserialize)]
struct BucketDbRow {
    bucket_ms: i64,
    calls: u64,
    errors: u64,
    #[serde(with = "serde_bytes")]
    latency: Vec<u8>,
    #[serde(with = "serde_bytes")]
    shapes: Vec<u8>,
}

/// Splits rollup rows by table.
fn rollup_rows(rows: &[Rollup]) -> (Vec<ToolRollupRow>, Vec<AgentRollupRow>) {
    let (mut tools, mut agents) = (Vec::new(), Vec::new());
    for row in rows {
        let Some(through) = row.through else { continue };
        let key = &row.key;
        let bucket_seconds = (key.granularity_ms / 1000) as u32;
        match &key.agent {
            None => {
                let [fingerprinted, oversized, truncated_sentinel, unparseable, too_deep, absent, not_success] =
                    row.outcomes;
                tools.push(ToolRollupRow {
                    project: key.project.clone(),
                    server: key.server.clone(),
                    tool: key.tool.clone(),
                    bucket_seconds,
                    bucket_ms: key.bucket_ms,
                    through_partition: through.partition,
                    through_offset: through.offset,
                    calls: row.calls,
                    errors: row.errors,
                    duration_sum: row.duration_sum_ms,
                    last_call_ms: row.last_call_ms,
                    fingerprinted,
                    oversized,
                    truncated_sentinel,
                    unparseable,
                    too_deep,
                    absent,
                    not_success,
                    latency: row.latency.encode(),
                    shapes: row.shapes.encode(),
                });
            }
            Some(agent) => agents.push(AgentRollupRow {
                project: key.project.clone(),
                server: key.server.clone(),
                tool: key.tool.clone(),
                bucket_seconds,
                bucket_ms: key.bucket_ms,
                agent: agent.clone(),
                through_partition: through.partition,
                through_offset: through.offset,
                calls: row.calls,
                errors: row.errors,
                duration_sum: row.duration_sum_ms,
                last_call_ms: row.last_call_ms,
                sessions: row.sessions.encode(),
            }),
        }
    }
    (tools, agents)
}

impl ToolRollupRow {
    fn into_rollup(self) -> Result<Rollup, StoreError> {
        Ok(Rollup {
            key: RollupKey {
                project: self.project,
                server: self.server,
                tool: self.tool,
                agent: None,
                granularity_ms: i64::from(self.bucket_seconds) * 1000,
                bucket_ms: self.bucket_ms,
            },
            through: Some(InputPosition { partition: self.through_partition, offset: self.through_offset }),
            calls: self.calls,
            errors: self.errors,
            duration_sum_ms: self.duration_sum,
            last_call_ms: self.last_call_ms,
            outcomes: [
                self.fingerprinted,
                self.oversized,
                self.truncated_sentinel,
                self.unparseable,
                self.too_deep,
                self.absent,
                self.not_success,
            ],
            latency: rollup::LatencySketch::decode(&self.latency)?,
            shapes: rollup::ShapeCounts::decode(&self.shapes)?,
            sessions: rollup::SessionSketch::default(),
        })
    }
}

impl AgentRollupRow {
    fn into_rollup(self) -> Result<Rollup, StoreError> {
        Ok(Rollup {
            key: RollupKey {
                project: self.project,
                server: self.server,
                tool: self.tool,
                agent: Some(self.agent),
                granularity_ms: i64::from(self.bucket_seconds) * 1000,
                bucket_ms: self.bucket_ms,
            },
            through: Some(InputPosition { partition: self.through_partition, offset: self.through_offset }),
            calls: self.calls,
            errors: self.errors,
            duration_sum_ms: self.duration_sum,
            last_call_ms: self.last_call_ms,
            sessions: rollup::SessionSketch::decode(&self.sessions)?,
            ..Default::default()
        })
    }
}

/// The tool rows of a window (minute rows at its start, hour rows after); see [`bind_window`].
const TOOL_WINDOW: &str = "FROM tool_rollups FINAL WHERE project = ?
    AND ((bucket_seconds = 3600 AND bucket_ms >= ?) OR (bucket_seconds = 60 AND bucket_ms >= ? AND bucket_ms < ?))";

/// Binds a project and the window's bounds to a query of [`TOOL_WINDOW`]'s rows.
fn bind_window(
    query: clickhouse::query::Query,
    project: &str,
    window: rollup::Window,
) -> clickhouse::query::Query {
    query.bind(project).bind(window.hours_from_ms).bind(window.from_ms).bind(window.hours_from_ms)
}

/// Keeps the last of several rows with the same key (a batch may update a server or tool more than once;
/// rows of one insert have no defined order among equal sort keys).
fn last_per_key<T, K: Ord>(rows: Vec<T>, key: impl Fn(&T) -> K) -> Vec<T> {
    let mut last: BTreeMap<K, T> = BTreeMap::new();
    for row in rows {
        last.insert(key(&row), row);
    }
    last.into_values().collect()
}

type Insert<'a> = futures_util::future::BoxFuture<'a, Result<(), StoreError>>;

/// Runs inserts at once; the first error, once all are done (a failed batch is written again whole).
async fn try_all(inserts: Vec<Insert<'_>>) -> Result<(), StoreError> {
    futures_util::future::join_all(inserts).await.into_iter().collect()
}

impl ClickHouseStore {
    /// Removes the rows that show forgotten keys (lightweight deletes: masked at once, gone with their
    /// parts' next merge); rows written later (the key seen again) are not touched.
    async fn forget_views(&self, forgotten: &[Forgotten]) -> Result<(), StoreError> {
        for forgotten in forgotten {
            match forgotten {
                Forgotten::Tool(tool) => {
                    self.client
                        .query("DELETE FROM tool_shapes WHERE project = ? AND server = ? AND tool = ?")
                        .bind(tool.project.as_str())
                        .bind(tool.server.as_str())
                        .bind(tool.tool.as_str())
                        .execute()
                        .await?;
                }
                Forgotten::Server(server) => {
                    for table in ["servers", "tool_schemas"] {
                        self.client
                            .query(&format!("DELETE FROM {table} WHERE project = ? AND server_name = ?"))
                            .bind(server.project.as_str())
                            .bind(server.server.as_str())
                            .execute()
                            .await?;
                    }
                }
            }
        }
        Ok(())
    }
    /// Connects to an already migrated database; fails with a hint when the tables are missing.
    pub async fn connect(settings: &ClickHouseSettings) -> Result<Self, StoreError> {
        let store = ClickHouseStore { client: client(settings)?.with_database(&settings.database) };
        store
            .client
            .query("SELECT count() FROM schema_migrations")
            .fetch_one::<u64>()
            .await
            .map_err(StoreError::from)?;
        Ok(store)
    }

    async fn insert<T>(&self, table: &str, rows: &[T]) -> Result<(), StoreError>
    where
        T: clickhouse::RowOwned + clickhouse::RowWrite,
    {
        if rows.is_empty() {
            return Ok(());
        }
        let mut insert =
            self.client.insert::<T>(table).await?.with_timeouts(Some(Duration::from_secs(30)), None);
        for row in rows {
            insert.write(row).await?;
        }
        insert.end().await?;
        Ok(())
    }

    /// Events the batch changes the lifecycle of but did not detect: read them back to write new rows.
    async fn stored_events(&self, ids: Vec<String>) -> Result<Vec<EventRow>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self
            .client
            .query("SELECT ?fields FROM schema_drift_events FINAL WHERE id IN ?")
            .bind(ids)
            .fetch_all()
            .await?)
    }

    async fn signal_groups(&self, filter: &str, bind: Vec<String>) -> Result<Vec<SignalGroup>, StoreError> {
        let mut query = self.client.query(&format!(
            "SELECT signal FROM shape_drift_signals FINAL WHERE {filter} ORDER BY detected_at, id"
        ));
        for value in bind {
            query = query.bind(value);
        }
        views::signal_groups(query.fetch_all::<String>().await?)
    }
}

/// Room for a run of snapshot keys listed as literals (server names are bounded by ingest's limits).
const SNAPSHOT_LIST_QUERY_BYTES: &str = "16777216";

#[async_trait]
impl DetectorStore for ClickHouseStore {
    async fn apply(&self, batch: Batch) -> Result<(), StoreError> {
        let mut events = batch.events.iter().map(EventRow::new).collect::<Result<Vec<_>, _>>()?;
        let pending: BTreeSet<&str> = batch.events.iter().map(|e| e.id.as_str()).collect();
        let elsewhere: Vec<String> = batch
            .event_updates
            .iter()
            .filter(|u| !pending.contains(u.id.as_str()))
            .map(|u| u.id.clone())
            .collect();
        let mut updated = self.stored_events(elsewhere).await?;
        for update in &batch.event_updates {
            let row = match events.iter_mut().find(|e| e.id == update.id) {
                Some(row) => row,
                None => match updated.iter_mut().find(|e| e.id == update.id) {
                    Some(row) => row,
                    None => {
                        tracing::warn!(id = %update.id, "status update for an unknown drift event ignored");
                        continue;
                    }
                },
            };
            row.status = name(&update.status)?;
            row.accepted_by = update.by.clone();
            row.accepted_at = (update.status == EventStatus::Accepted).then(|| ms(update.at));
        }
        events.extend(updated);
        let events = last_per_key(events, |e| e.id.clone());

        let acceptances = batch
            .acceptances
            .iter()
            .map(|a| {
                Ok(AcceptanceRow {
                    project: a.project.clone(),
                    server_name: a.server_name.clone(),
                    id: a.id.clone(),
                    previous_hash: a.previous_hash.clone(),
                    new_hash: a.new_hash.clone(),
                    accepted_by: a.accepted_by.clone(),
                    accepted_at: ms(a.accepted_at),
                    event_ids: text(&a.event_ids)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;

        let servers = batch
            .servers
            .iter()
            .map(|s| {
                Ok(ServerRowDb {
                    project: s.project.clone(),
                    server_name: s.server_name.clone(),
                    status: name(&s.status)?,
                    schema_hash: s.schema_hash.clone(),
                    tool_count: s.tool_count,
                    last_seen: s.last_seen.map(ms),
                    note: s.note.clone(),
                    latency_ms: s.latency_ms,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let servers = last_per_key(servers, |s| (s.project.clone(), s.server_name.clone()));

        let mut snapshots = Vec::new();
        let mut schemas = Vec::new();
        for StoredToolList { project, server, captured_at, hash, tools, surfaces } in &batch.tool_lists {
            for tool in tools.declared() {
                let input = tool.input_schema.unwrap_or_else(|| Value::Object(Default::default()));
                schemas.push(ToolSchemaRow {
                    project: project.clone(),
                    server_name: server.clone(),
                    schema_hash: hash.clone(),
                    tool_name: tool.name,
                    description: tool.description,
                    input_schema: text(&input)?,
                    captured_at: ms(*captured_at),
                });
            }
            snapshots.push(SnapshotRow {
                project: project.clone(),
                server_name: server.clone(),
                schema_hash: hash.clone(),
                captured_at: ms(*captured_at),
                tools: text(tools)?,
                surfaces: surfaces.as_deref().map(text).transpose()?,
            });
        }
        let schemas = last_per_key(schemas, |s| {
            (s.project.clone(), s.server_name.clone(), s.schema_hash.clone(), s.tool_name.clone())
        });
        let snapshots =
            last_per_key(snapshots, |s| (s.project.clone(), s.server_name.clone(), s.schema_hash.clone()));

        let signals = batch
            .signals
            .iter()
            .map(|s| {
                Ok(SignalRow {
                    project: s.project.clone(),
                    server: s.server.clone(),
                    tool: s.tool.clone(),
                    id: s.id.clone(),
                    detected_at: ms(s.detected_at),
                    shape_hash: s.shape_hash.clone(),
                    signal: text(s)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;

        let shapes = batch
            .tool_shapes
            .iter()
            .map(|row| {
                Ok(ToolShapeDb {
                    project: row.project.clone(),
                    server: row.shape.server.clone(),
                    tool: row.shape.tool.clone(),
                    shape: text(&row.shape)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let shapes = last_per_key(shapes, |s| (s.project.clone(), s.server.clone(), s.tool.clone()));

        let settings = batch
            .settings
            .iter()
            .map(|(project, thresholds)| {
                Ok(SettingRow { project: project.clone(), thresholds: text(thresholds)? })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let settings = last_per_key(settings, |s| s.project.clone());

        let commands = batch
            .applied_commands
            .iter()
            .map(|(id, at, result)| {
                Ok(CommandRow { id: id.clone(), applied_at: ms(*at), result: text(result)? })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;

        let calls = batch
            .calls
            .iter()
            .map(|(id, _, call)| {
                Ok(CallRow {
                    project: call.project.to_string(),
                    server: call.server.to_string(),
                    tool: call.tool.to_string(),
                    ingested_at: ms(call.ingested_at),
                    id: id.clone(),
                    span_id: call.span_id.clone(),
                    session_id: call.session_id.clone(),
                    agent_name: call.agent_name.clone(),
                    started_at: ms(call.started_at),
                    duration_ms: call.duration_ms,
                    status: name(&call.status)?,
                    error: call.error.clone(),
                    shape_outcome: call.shape_outcome.as_str().to_owned(),
                    shape_hash: call.shape_hash.clone(),
                    compact_bytes: call.compact_bytes,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let identities: Vec<CallIdentityRow> = batch
            .call_identities
            .iter()
            .map(|(identity, position, at)| CallIdentityRow {
                identity: identity.clone(),
                partition: position.partition,
                offset: position.offset,
                ingested_at: ms(*at),
            })
            .collect();
        let notifications = batch
            .notifications
            .iter()
            .map(|n| {
                Ok(NotificationRow {
                    id: n.id.clone(),
                    project: n.project.clone(),
                    server_name: n.server_name.clone(),
                    kind: n.kind.as_str().to_owned(),
                    at: ms(n.at),
                    body: text(n)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        // Every output but the traffic a reader counts is written at once (each table its own insert).
        try_all(vec![
            Box::pin(self.insert("schema_drift_events", &events)),
            Box::pin(self.insert("baseline_acceptances", &acceptances)),
            Box::pin(self.insert("servers", &servers)),
            Box::pin(self.insert("tool_schemas", &schemas)),
            Box::pin(self.insert("server_snapshots", &snapshots)),
            Box::pin(self.insert("shape_drift_signals", &signals)),
            Box::pin(self.insert("tool_shapes", &shapes)),
            Box::pin(self.insert("settings", &settings)),
            Box::pin(self.insert("applied_commands", &commands)),
            Box::pin(self.insert("call_identities_by_stream", &identities)),
            Box::pin(self.insert("notifications", &notifications)),
        ])
        .await?;
        // Rollup rows are whole values: a row stored by a batch that crashed before its positions is
        // replaced by the same row, and its calls are skipped when replayed (see `rollup`).
        let (tool_rollups, agent_rollups) = rollup_rows(&batch.rollups);
        // The traffic comes after every other output: a reader that sees a batch's calls (in rollups or
        // raw) sees all of its signals, events and shapes.
        try_all(vec![
            Box::pin(self.insert("tool_rollups", &tool_rollups)),
            Box::pin(self.insert("agent_rollups", &agent_rollups)),
            Box::pin(self.insert("tool_calls", &calls)),
        ])
        .await?;

        // Forgotten keys' rows go after the batch's own (a row it wrote for a key it then forgot too).
        self.forget_views(&batch.forgotten).await?;

        // Last, in one insert: the state and the positions that the outputs above include.
        let mut state: Vec<StateRow> = batch
            .states
            .into_iter()
            .map(|row| StateRow {
                consumer: CONSUMER.into(),
                kind: row.kind,
                key: row.key,
                stream: row.stream,
                state: row.state,
            })
            .collect();
        state.extend(batch.positions.iter().map(|(stream, offset)| StateRow {
            consumer: CONSUMER.into(),
            kind: POSITION.into(),
            key: stream.to_string(),
            stream: *stream,
            state: offset.to_string(),
        }));
        // A forgotten key's state is replaced by an empty one (resume skips those), in the insert of the
        // positions: forgetting is stored exactly when the batch is.
        state.extend(batch.forgotten.iter().map(|forgotten| {
            let (kind, key) = forgotten.state_key();
            StateRow { consumer: CONSUMER.into(), kind: kind.into(), key, stream: 0, state: String::new() }
        }));
        let state = last_per_key(state, |s| (s.kind.clone(), s.key.clone()));
        self.insert("detector_state", &state).await
    }

    async fn rollups(&self, keys: &[RollupKey]) -> Result<Vec<Rollup>, StoreError> {
        // One range read per project and table over the keys' tools and times (the sort key's prefix), then
        // only the rows asked for: a list of thousands of whole keys would be read key by key.
        let wanted: BTreeSet<&RollupKey> = keys.iter().collect();
        let mut scopes: BTreeMap<(&str, bool), RollupScope<'_>> = BTreeMap::new();
        for key in keys {
            let scope = scopes.entry((key.project.as_str(), key.agent.is_some())).or_default();
            scope.tools.insert((key.server.as_str(), key.tool.as_str()));
            if let Some(agent) = &key.agent {
                scope.agents.insert(agent.as_str());
            }
            scope.from_ms = scope.from_ms.min(key.bucket_ms);
            scope.to_ms = scope.to_ms.max(key.bucket_ms);
        }
        let mut rows = Vec::new();
        for ((project, agents), scope) in scopes {
            let tools: Vec<(&str, &str)> = scope.tools.into_iter().collect();
            for chunk in tools.chunks(1000) {
                let found = if agents {
                    let agent_names: Vec<&str> = scope.agents.iter().copied().collect();
                    let found: Vec<AgentRollupRow> = self
                        .client
                        .query(
                            "SELECT ?fields FROM agent_rollups FINAL WHERE project = ? AND (server, tool) IN ?
                               AND bucket_seconds IN (60, 3600) AND bucket_ms >= ? AND bucket_ms <= ? AND agent IN ?",
                        )
                        .bind(project)
                        .bind(chunk)
                        .bind(scope.from_ms)
                        .bind(scope.to_ms)
                        .bind(agent_names)
                        .fetch_all()
                        .await?;
                    found.into_iter().map(AgentRollupRow::into_rollup).collect::<Result<Vec<_>, _>>()?
                } else {
                    let found: Vec<ToolRollupRow> = self
                        .client
                        .query(
                            "SELECT ?fields FROM tool_rollups FINAL WHERE project = ? AND (server, tool) IN ?
                               AND bucket_seconds IN (60, 3600) AND bucket_ms >= ? AND bucket_ms <= ?",
                        )
                        .bind(project)
                        .bind(chunk)
                        .bind(scope.from_ms)
                        .bind(scope.to_ms)
                        .fetch_all()
                        .await?;
                    found.into_iter().map(ToolRollupRow::into_rollup).collect::<Result<Vec<_>, _>>()?
                };
                rows.extend(found.into_iter().filter(|row| wanted.contains(&row.key)));
            }
        }
        Ok(rows)
    }

    async fn backfill_rollups(
        &self,
        tools: &[(ToolKey, InputPosition)],
        mut backfill: rollup::Backfill,
    ) -> Result<Vec<Rollup>, StoreError> {
        for (key, through) in tools {
            let (project, server, tool) = (key.project.as_str(), key.server.as_str(), key.tool.as_str());
            // Streamed: a tool's calls of 31 days need not fit in memory, only its rollup rows.
            let mut cursor = self
                .client
                .query(
                    "SELECT ?fields FROM tool_calls FINAL WHERE project = ? AND server = ? AND tool = ?
                       AND ingested_at >= fromUnixTimestamp64Milli(toInt64(?))",
                )
                .bind(project)
                .bind(server)
                .bind(tool)
                .bind(backfill.since_ms())
                .fetch::<StoredCallRow>()?;
            while let Some(row) = cursor.next().await? {
                let call = rollup::CallFacts {
                    project,
                    server,
                    tool,
                    agent: row.agent_name.as_deref(),
                    session: row.session_id.as_deref(),
                    started_ms: row.started_at,
                    ingested_ms: row.ingested_at,
                    duration_ms: row.duration_ms,
                    error: row.status == "error",
                    outcome: crate::stored_outcome(&row.shape_outcome),
                    shape_hash: row.shape_hash.as_deref(),
                };
                backfill.add(&call, *through);
            }
        }
        Ok(backfill.finish())
    }

    async fn resume(&self, streams: Streams<'_>) -> Result<Resume, StoreError> {
        let query = match streams {
            Streams::All => self
                .client
                .query("SELECT ?fields FROM detector_state FINAL WHERE consumer = ? AND state != ''")
                .bind(CONSUMER),
            Streams::Only(streams) => self
                .client
                .query("SELECT ?fields FROM detector_state FINAL WHERE consumer = ? AND stream IN ? AND state != ''")
                .bind(CONSUMER)
                .bind(streams),
        };
        let rows: Vec<StateRow> = query.fetch_all().await?;
        let mut resume = Resume::default();
        for row in rows {
            if row.kind == POSITION {
                let bad = |text: &str| StoreError::Corrupt(format!("bad stored position {text}"));
                // Offsets pass 2^32 within days on a busy partition: read them as u64, streams as u32.
                let stream: u32 = row.key.parse().map_err(|_| bad(&row.key))?;
                let offset: u64 = row.state.parse().map_err(|_| bad(&row.state))?;
                resume.positions.insert(stream, offset);
            } else {
                resume.states.push(DetectorState {
                    kind: row.kind,
                    key: row.key,
                    stream: row.stream,
                    state: row.state,
                });
            }
        }
        let settings: Vec<SettingRow> =
            self.client.query("SELECT ?fields FROM settings FINAL").fetch_all().await?;
        resume.settings = settings
            .into_iter()
            .map(|row| Ok((row.project, serde_json::from_str(&row.thresholds)?)))
            .collect::<Result<_, StoreError>>()?;
        Ok(resume)
    }

    fn repeat_lookup(&self) -> crate::RepeatLookup {
        crate::RepeatLookup::Remember
    }

    async fn recent_identities(
        &self,
        streams: Streams<'_>,
        since: Timestamp,
        most_per_stream: usize,
    ) -> Result<Vec<(String, InputPosition, Timestamp)>, StoreError> {
        // One range of the sort key per stream (stream, then time).
        let (filter, streams) = match streams {
            Streams::All => ("1", Vec::new()),
            Streams::Only([]) => return Ok(Vec::new()),
            Streams::Only(streams) => ("partition IN ?", streams.to_vec()),
        };
        let mut query = self.client.query(&format!(
            "SELECT identity, partition, offset, ingested_at FROM call_identities_by_stream
             WHERE {filter} AND ingested_at >= fromUnixTimestamp64Milli(toInt64(?))
             ORDER BY partition, ingested_at DESC LIMIT ? BY partition"
        ));
        if !streams.is_empty() {
            query = query.bind(streams);
        }
        let rows: Vec<CallIdentityRow> =
            query.bind(ms(since)).bind(most_per_stream as u64).fetch_all().await?;
        Ok(rows
            .into_iter()
            .filter_map(|row| {
                let at = Timestamp::from_millis(row.ingested_at)?;
                Some((row.identity, InputPosition { partition: row.partition, offset: row.offset }, at))
            })
            .collect())
    }

    async fn stored_calls(
        &self,
        identities: &[String],
        since: Timestamp,
    ) -> Result<HashMap<String, InputPosition>, StoreError> {
        // Not the worker's way here (`RepeatLookup::Remember`): a full read of the window, for tools.
        let wanted: std::collections::HashSet<&String> = identities.iter().collect();
        let rows = self.recent_identities(Streams::All, since, usize::MAX / 2).await?;
        Ok(rows
            .into_iter()
            .filter(|(identity, _, _)| wanted.contains(identity))
            .map(|(identity, position, _)| (identity, position))
            .collect())
    }

    /// The tables' TTLs expire rows by age; what a TTL cannot say is "all but a server's newest
    /// [`retention::SNAPSHOTS_PER_SERVER`] snapshots": those go here, a run of them at a time, from
    /// `tool_schemas` and `server_snapshots` by the same list (a snapshot seen again since — a list
    /// changed back — ranks by its newer row and stays). Answers the rows removed from both.
    async fn expire(&self, _now: Timestamp) -> Result<u64, StoreError> {
        let mut removed = 0;
        loop {
            let older: Vec<(String, String, String)> = self
                .client
                .query(
                    "SELECT project, server_name, schema_hash FROM (
                         SELECT project, server_name, schema_hash,
                                row_number() OVER (PARTITION BY project, server_name ORDER BY captured_at DESC) AS rank
                         FROM server_snapshots FINAL)
                     WHERE rank > ? LIMIT ?",
                )
                .bind(retention::SNAPSHOTS_PER_SERVER)
                .bind(retention::RUN)
                .fetch_all()
                .await?;
            if older.is_empty() {
                return Ok(removed);
            }
            for table in ["tool_schemas", "server_snapshots"] {
                let rows: u64 = self
                    .client
                    .query(&format!(
                        "SELECT count() FROM {table} WHERE (project, server_name, schema_hash) IN ?"
                    ))
                    .with_setting("max_query_size", SNAPSHOT_LIST_QUERY_BYTES)
                    .bind(&older)
                    .fetch_one()
                    .await?;
                // A lightweight delete: the rows are masked at once and go with their parts' next merge.
                self.client
                    .query(&format!("DELETE FROM {table} WHERE (project, server_name, schema_hash) IN ?"))
                    .with_setting("max_query_size", SNAPSHOT_LIST_QUERY_BYTES)
                    .bind(&older)
                    .execute()
                    .await?;
                removed += rows;
            }
            if (older.len() as i64) < retention::RUN {
                return Ok(removed);
            }
        }
    }
}

#[async_trait]
impl QueryStore for ClickHouseStore {
    async fn servers(&self, project: &str) -> Result<Vec<ServerHealth>, StoreError> {
        let open: Vec<(String, Option<String>, Option<String>)> = self
            .client
            .query(
                "SELECT server_name, max_classification, max_severity FROM schema_drift_events FINAL
                 WHERE project = ? AND status = 'open'",
            )
            .bind(project)
            .fetch_all()
            .await?;
        let changes: Vec<(String, String, u32)> = self
            .client
            .query(
                "SELECT server_name, JSONExtractString(change, 'classification') AS classification,
                        toUInt32(count())
                 FROM schema_drift_events FINAL ARRAY JOIN JSONExtractArrayRaw(changes) AS change
                 WHERE project = ? AND status = 'open' GROUP BY server_name, classification",
            )
            .bind(project)
            .fetch_all()
            .await?;
        // Changes the detector found but did not list (it lists at most so many of each kind in an event).
        let omitted: Vec<(String, String, u32)> = self
            .client
            .query(
                "SELECT server_name, tupleElement(omitted, 1) AS classification,
                        toUInt32(sum(tupleElement(omitted, 2)))
                 FROM schema_drift_events FINAL
                 ARRAY JOIN JSONExtractKeysAndValues(event, 'omitted_changes', 'UInt64') AS omitted
                 WHERE project = ? AND status = 'open' GROUP BY server_name, classification",
            )
            .bind(project)
            .fetch_all()
            .await?;
        let changes = changes
            .into_iter()
            .chain(omitted)
            .map(|(server, classification, n)| (server, Some(classification), n));
        let open = views::open_counts(open, changes);
        let rows: Vec<ServerRowDb> = self
            .client
            .query("SELECT ?fields FROM servers FINAL WHERE project = ? ORDER BY server_name")
            .bind(project)
            .fetch_all()
            .await?;
        let servers = rows
            .into_iter()
            .map(|row| {
                let open = open.get(&row.server_name).cloned().unwrap_or_default();
                Ok(ServerHealth {
                    status: parse_name::<ServerStatus>(&row.status)?,
                    schema_hash: row.schema_hash,
                    tool_count: row.tool_count,
                    last_seen: row.last_seen.map(timestamp).transpose()?,
                    latency_ms: row.latency_ms,
                    open_drift: open.events,
                    open_changes: open.changes,
                    max_severity: open.max_severity.as_deref().map(parse_name).transpose()?,
                    note: row.note,
                    server_name: row.server_name,
                    contract_mismatches: Vec::new(),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let traced: Vec<String> = self
            .client
            .query("SELECT DISTINCT server FROM tool_shapes WHERE project = ?")
            .bind(project)
            .fetch_all()
            .await?;
        let servers = views::with_trace_only_servers(servers, traced);
        // The LIKE only narrows the rows read; the JSON decides.
        let mismatched: Vec<(String, String, String)> = self
            .client
            .query(
                "SELECT server, tool, shape FROM tool_shapes FINAL
                 WHERE project = ? AND position(shape, '\"mismatch\"') > 0",
            )
            .bind(project)
            .fetch_all()
            .await?;
        Ok(views::with_contract_mismatches(servers, views::contract_mismatches(mismatched)?))
    }

    async fn drift_history(
        &self,
        project: &str,
        server: &str,
        limit: u32,
        list_bytes: usize,
    ) -> Result<Vec<SchemaDriftEvent>, StoreError> {
        // Read row by row: only the events answered with their lists are held whole.
        let mut rows = self
            .client
            .query(
                "SELECT ?fields FROM schema_drift_events FINAL WHERE project = ? AND server_name = ?
                 ORDER BY detected_at DESC, id DESC LIMIT ?",
            )
            .bind(project)
            .bind(server)
            .bind(limit)
            .fetch::<EventRow>()?;
        let mut history = views::History::new(list_bytes);
        while let Some(row) = rows.next().await? {
            history.push(row.event.len(), row.into_event()?);
        }
        Ok(history.into_events())
    }

    async fn drift_event(
        &self,
        project: &str,
        server: &str,
        id: &str,
    ) -> Result<Option<SchemaDriftEvent>, StoreError> {
        let row: Option<EventRow> = self
            .client
            .query(
                "SELECT ?fields FROM schema_drift_events FINAL WHERE project = ? AND server_name = ? AND id = ?",
            )
            .bind(project)
            .bind(server)
            .bind(id)
            .fetch_optional()
            .await?;
        row.map(EventRow::into_event).transpose()
    }

    async fn drift_impact(&self, query: ImpactQuery<'_>) -> Result<DriftImpact, StoreError> {
        let events: Vec<String> = self
            .client
            .query("SELECT changes FROM schema_drift_events FINAL WHERE project = ? AND server_name = ? AND status = 'open'")
            .bind(query.project)
            .bind(query.server)
            .fetch_all()
            .await?;
        let window = rollup::window(ms(query.now), query.hours);
        let rows: Vec<AgentWindowRow> = self
            .client
            .query(
                "SELECT agent, calls, errors, duration_sum, last_call_ms, sessions FROM agent_rollups FINAL
                 WHERE project = ? AND server = ? AND tool = ?
                   AND ((bucket_seconds = 3600 AND bucket_ms >= ?) OR (bucket_seconds = 60 AND bucket_ms >= ? AND bucket_ms < ?))",
            )
            .bind(query.project)
            .bind(query.server)
            .bind(query.tool)
            .bind(window.hours_from_ms)
            .bind(window.from_ms)
            .bind(window.hours_from_ms)
            .fetch_all()
            .await?;
        let rows = rows
            .into_iter()
            .map(|row| rollup::AgentRow {
                agent: row.agent,
                calls: row.calls,
                errors: row.errors,
                duration_sum_ms: row.duration_sum,
                last_call_ms: row.last_call_ms,
                sessions: row.sessions,
            })
            .collect();
        let (agents, total_sessions) = rollup::agent_stats(rows)?;
        views::drift_impact(&query, events, agents, total_sessions)
    }

    async fn tool_schemas(&self, project: &str, server: &str) -> Result<Vec<ToolSchema>, StoreError> {
        let rows: Vec<ToolSchemaRow> = self
            .client
            .query(
                "SELECT ?fields FROM tool_schemas FINAL WHERE project = ? AND server_name = ? AND schema_hash = (
                     SELECT argMax(schema_hash, captured_at) FROM server_snapshots FINAL
                     WHERE project = ? AND server_name = ?)
                 ORDER BY tool_name",
            )
            .bind(project)
            .bind(server)
            .bind(project)
            .bind(server)
            .fetch_all()
            .await?;
        rows.into_iter()
            .map(|row| {
                Ok(ToolSchema {
                    server_name: row.server_name,
                    tool_name: row.tool_name,
                    description: row.description,
                    input_schema: serde_json::from_str(&row.input_schema)?,
                    captured_at: timestamp(row.captured_at)?,
                })
            })
            .collect()
    }

    async fn server_surfaces(
        &self,
        project: &str,
        server: &str,
    ) -> Result<Option<ServerSurfaces>, StoreError> {
        let surfaces: Vec<Option<String>> = self
            .client
            .query(
                // The server's current list (two captures may share a time), else the newest.
                "SELECT surfaces FROM server_snapshots FINAL WHERE project = ? AND server_name = ?
                 ORDER BY schema_hash = ifNull((SELECT any(schema_hash) FROM servers FINAL
                     WHERE project = ? AND server_name = ?), '') DESC, captured_at DESC LIMIT 1",
            )
            .bind(project)
            .bind(server)
            .bind(project)
            .bind(server)
            .fetch_all()
            .await?;
        Ok(surfaces.into_iter().next().flatten().map(|json| serde_json::from_str(&json)).transpose()?)
    }

    async fn tools(&self, project: &str, hours: u32, now: Timestamp) -> Result<Vec<ToolSummary>, StoreError> {
        let declared: Vec<(String, String)> = self
            .client
            .query(
                "SELECT server_name, tool_name FROM tool_schemas FINAL WHERE project = ? AND (server_name, schema_hash) IN (
                     SELECT server_name, argMax(schema_hash, captured_at) FROM server_snapshots FINAL
                     WHERE project = ? GROUP BY server_name)",
            )
            .bind(project)
            .bind(project)
            .fetch_all()
            .await?;
        let shape_rows: Vec<(String, String, String)> = self
            .client
            .query("SELECT server, tool, shape FROM tool_shapes FINAL WHERE project = ?")
            .bind(project)
            .fetch_all()
            .await?;
        let mut shapes = HashMap::new();
        for (server, tool, json) in shape_rows {
            shapes.insert((server, tool), views::shape_status(&json)?);
        }
        let window = rollup::window(ms(now), hours);
        let select = self.client.query(&format!(
            "SELECT toString(server), toString(tool), sum(calls), sum(errors), sum(duration_sum), max(last_call_ms)
             {TOOL_WINDOW} GROUP BY server, tool ORDER BY server, tool"
        ));
        let sums: Vec<(String, String, u64, u64, f64, i64)> =
            bind_window(select, project, window).fetch_all().await?;
        let calls: Vec<views::CallStats> = sums
            .into_iter()
            .map(|(server, tool, calls, errors, duration_sum, last)| {
                (server, tool, calls, errors, duration_sum / calls.max(1) as f64, last)
            })
            .collect();
        views::tool_summaries(&declared.into_iter().collect(), shapes, calls)
    }

    async fn tool_shape(
        &self,
        project: &str,
        server: &str,
        tool: &str,
    ) -> Result<Option<ToolShape>, StoreError> {
        let json: Option<String> = self
            .client
            .query("SELECT shape FROM tool_shapes FINAL WHERE project = ? AND server = ? AND tool = ?")
            .bind(project)
            .bind(server)
            .bind(tool)
            .fetch_optional()
            .await?;
        let Some(json) = json else { return Ok(None) };
        let mut shape: ToolShape = serde_json::from_str(&json)?;
        shape.signal_groups = self
            .signal_groups(
                "project = ? AND server = ? AND tool = ?",
                vec![project.to_owned(), server.to_owned(), tool.to_owned()],
            )
            .await?;
        Ok(Some(shape))
    }

    async fn shape_drift(
        &self,
        project: &str,
        hours: u32,
        now: Timestamp,
    ) -> Result<Vec<SignalGroup>, StoreError> {
        self.signal_groups(
            "project = ? AND detected_at >= fromUnixTimestamp64Milli(toInt64(?))",
            vec![project.to_owned(), since(now, hours).to_string()],
        )
        .await
    }

    async fn thresholds(&self, project: &str) -> Result<Option<DetectorThresholds>, StoreError> {
        let json: Option<String> = self
            .client
            .query("SELECT thresholds FROM settings FINAL WHERE project = ?")
            .bind(project)
            .fetch_optional()
            .await?;
        json.map(|j| serde_json::from_str(&j).map_err(StoreError::from)).transpose()
    }

    async fn dead_letters(&self, project: &str) -> Result<Vec<DeadLetterCount>, StoreError> {
        let states: Vec<String> = self
            .client
            .query(
                "SELECT state FROM detector_state FINAL
                 WHERE consumer = ? AND kind = ? AND startsWith(key, ?) AND state != ''",
            )
            .bind(CONSUMER)
            .bind(crate::DEAD_LETTER_STATE)
            .bind(format!("{project}/"))
            .fetch_all()
            .await?;
        Ok(crate::dead_letter_counts(states))
    }

    async fn return_value_stats(
        &self,
        project: &str,
        hours: u32,
        now: Timestamp,
    ) -> Result<ReturnValueStats, StoreError> {
        let window = rollup::window(ms(now), hours);
        type Sums = (String, String, u64, u64, u64, u64, u64, u64, u64);
        let select = self.client.query(&format!(
            "SELECT toString(server), toString(tool), sum(fingerprinted), sum(oversized), sum(truncated_sentinel),
                    sum(unparseable), sum(too_deep), sum(absent), sum(not_success)
             {TOOL_WINDOW} GROUP BY server, tool"
        ));
        let sums: Vec<Sums> = bind_window(select, project, window).fetch_all().await?;
        let rows = sums
            .into_iter()
            .flat_map(|(server, tool, a, b, c, d, e, f, g)| {
                rollup::outcome_rows(&server, &tool, [a, b, c, d, e, f, g])
            })
            .collect();
        Ok(views::return_value_stats(hours, rows))
    }

    async fn call_buckets(&self, query: BucketQuery<'_>) -> Result<Vec<CallBucket>, StoreError> {
        let granularity = rollup::timeline_granularity(ms(query.from), query.bucket_ms).ok_or_else(|| {
            StoreError::Query(format!("buckets of {} ms are not whole minutes", query.bucket_ms))
        })?;
        let tool_filter = if query.tool.is_some() { "AND tool = ?" } else { "" };
        let mut select = self
            .client
            .query(&format!(
                "SELECT bucket_ms, calls, errors, latency, shapes FROM tool_rollups FINAL
                 WHERE project = ? AND server = ? {tool_filter} AND bucket_seconds = ? AND bucket_ms >= ? AND bucket_ms < ?"
            ))
            .bind(query.project)
            .bind(query.server);
        if let Some(tool) = query.tool {
            select = select.bind(tool);
        }
        let rows: Vec<BucketDbRow> = select
            .bind((granularity / 1000) as u32)
            .bind(ms(query.from))
            .bind(ms(query.to))
            .fetch_all()
            .await?;
        let rows = rows
            .into_iter()
            .map(|row| rollup::BucketRow {
                bucket_ms: row.bucket_ms,
                calls: row.calls,
                errors: row.errors,
                latency: row.latency,
                shapes: row.shapes,
            })
            .collect();
        views::call_buckets(&query, rollup::bucket_aggregates(ms(query.from), query.bucket_ms, rows)?)
    }

    async fn recent_calls(
        &self,
        project: &str,
        server: &str,
        tool: &str,
        since: Timestamp,
        limit: u32,
    ) -> Result<Vec<RecentCall>, StoreError> {
        let rows: Vec<RecentCallRow> = self
            .client
            .query(
                "SELECT ?fields FROM tool_calls FINAL WHERE project = ? AND server = ? AND tool = ?
                   AND ingested_at >= fromUnixTimestamp64Milli(toInt64(?))
                 ORDER BY ingested_at DESC, started_at DESC, span_id DESC LIMIT ?",
            )
            .bind(project)
            .bind(server)
            .bind(tool)
            .bind(ms(since))
            .bind(limit)
            .fetch_all()
            .await?;
        rows.into_iter()
            .map(|row| {
                Ok(RecentCall {
                    span_id: row.span_id,
                    session_id: row.session_id,
                    agent_name: row.agent_name,
                    started_at: timestamp(row.started_at)?,
                    ingested_at: timestamp(row.ingested_at)?,
                    duration_ms: row.duration_ms,
                    status: row.status,
                    error: row.error,
                    shape_outcome: row.shape_outcome,
                    shape_hash: row.shape_hash,
                    compact_bytes: row.compact_bytes,
                })
            })
            .collect()
    }

    async fn signals(
        &self,
        project: &str,
        server: &str,
        tool: Option<&str>,
        from: Timestamp,
    ) -> Result<Vec<ShapeDriftSignal>, StoreError> {
        let tool_filter = if tool.is_some() { "AND tool = ?" } else { "" };
        let mut query = self
            .client
            .query(&format!(
                "SELECT signal FROM shape_drift_signals FINAL WHERE project = ? AND server = ? {tool_filter}
                   AND detected_at >= fromUnixTimestamp64Milli(toInt64(?)) ORDER BY detected_at, id"
            ))
            .bind(project)
            .bind(server);
        if let Some(tool) = tool {
            query = query.bind(tool);
        }
        views::signals(query.bind(ms(from)).fetch_all::<String>().await?)
    }

    async fn command_result(&self, id: &str) -> Result<Option<Value>, StoreError> {
        let json: Option<String> = self
            .client
            .query("SELECT result FROM applied_commands FINAL WHERE id = ?")
            .bind(id)
            .fetch_optional()
            .await?;
        json.map(|j| serde_json::from_str(&j).map_err(StoreError::from)).transpose()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.client.query("SELECT 1").fetch_one::<u8>().await?;
        Ok(())
    }
}

#[async_trait]
impl NotificationStore for ClickHouseStore {
    async fn pending_notifications(
        &self,
        webhook: &str,
        since: Timestamp,
        limit: usize,
    ) -> Result<Vec<Notification>, StoreError> {
        let bodies: Vec<String> = self
            .client
            .query(
                "SELECT body FROM notifications FINAL
                 WHERE at >= fromUnixTimestamp64Milli(toInt64(?))
                   AND id NOT IN (SELECT id FROM notifications_sent WHERE webhook = ?)
                 ORDER BY at, id LIMIT ?",
            )
            .bind(ms(since))
            .bind(webhook)
            .bind(limit as u64)
            .fetch_all()
            .await?;
        bodies.iter().map(|body| serde_json::from_str(body).map_err(StoreError::from)).collect()
    }

    async fn record_notified(
        &self,
        webhook: &str,
        id: &str,
        outcome: &str,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        let row = NotifiedRow {
            webhook: webhook.to_owned(),
            id: id.to_owned(),
            outcome: outcome.to_owned(),
            sent_at: ms(at),
        };
        self.insert("notifications_sent", &[row]).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migration_files_split_into_statements_without_comments() {
        let parts = statements(MIGRATIONS[0]);
        assert!(parts.len() >= 10, "{parts:?}");
        assert!(parts.iter().all(|s| s.starts_with("CREATE TABLE IF NOT EXISTS")), "{parts:?}");
        assert!(parts.iter().all(|s| !s.contains("--")), "{parts:?}");
    }
}
