//! The embedded store: SQLite (bundled), WAL, versioned migrations from `schemas/sqlite/`. One writer
//! connection (the worker) and one reader connection (the API), so queries never wait on a write.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use driftline_schemas::api::{
    CallBucket, DriftImpact, ReturnValueStats, ServerHealth, SignalGroup, ToolSchema, ToolShape, ToolSummary,
};
use driftline_schemas::{
    DetectorThresholds, EventStatus, InputPosition, Notification, SchemaDriftEvent, ServerStatus,
    ShapeDriftSignal, Timestamp,
};
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde_json::Value;

use crate::views::{self, ms, name, parse_name, since, text, timestamp};
use crate::{
    Batch, BucketQuery, DetectorState, DetectorStore, ImpactQuery, NotificationStore, QueryStore, Resume,
    StoreError, Streams,
};

/// Migrations in order; the version is the position (1-based).
const MIGRATIONS: &[&str] = &[
    include_str!("../../schemas/sqlite/0001_init.sql"),
    include_str!("../../schemas/sqlite/0002_probe_latency.sql"),
    include_str!("../../schemas/sqlite/0003_positions_per_partition.sql"),
    include_str!("../../schemas/sqlite/0004_state_stream.sql"),
    include_str!("../../schemas/sqlite/0005_call_identities.sql"),
    include_str!("../../schemas/sqlite/0006_notifications.sql"),
    include_str!("../../schemas/sqlite/0007_calls_by_start.sql"),
];
const WORKER: &str = "detectors";

#[derive(Clone)]
pub struct SqliteStore {
    writer: Arc<Mutex<Connection>>,
    reader: Arc<Mutex<Connection>>,
}

impl SqliteStore {
    /// Opens the store at `path`, applying any migration not yet applied.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let writer = Connection::open(path)?;
        writer.pragma_update(None, "journal_mode", "WAL")?;
        writer.pragma_update(None, "synchronous", "FULL")?;
        writer.busy_timeout(Duration::from_secs(5))?;
        // Checkpoints every 10,000 pages instead of 1,000: the index pages every batch touches (calls and
        // identities are keyed by hashes) are copied back once per checkpoint, not ten times (detector on
        // a 670,000-span backlog: ≈13,700 → ≈15,300 spans/s). The WAL grows to ≈40 MB between them.
        writer.pragma_update(None, "wal_autocheckpoint", 10_000)?;
        migrate(&writer)?;
        let reader = Connection::open(path)?;
        reader.busy_timeout(Duration::from_secs(5))?;
        Ok(SqliteStore { writer: Arc::new(Mutex::new(writer)), reader: Arc::new(Mutex::new(reader)) })
    }

    async fn with<T: Send + 'static>(
        connection: &Arc<Mutex<Connection>>,
        work: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let connection = connection.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard =
                connection.lock().map_err(|_| StoreError::Unavailable("store lock poisoned".into()))?;
            work(&mut guard)
        })
        .await
        .map_err(|err| StoreError::Unavailable(format!("store task failed: {err}")))?
    }

    async fn read<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        Self::with(&self.reader, work).await
    }
}

/// Applies the migrations not yet recorded in `schema_migrations`, each in its own transaction.
fn migrate(connection: &Connection) -> Result<(), StoreError> {
    connection.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
    )?;
    let applied: i64 =
        connection
            .query_row("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", [], |row| row.get(0))?;
    for (index, sql) in MIGRATIONS.iter().enumerate() {
        let version = index as i64 + 1;
        if version <= applied {
            continue;
        }
        connection.execute_batch(&format!(
            "BEGIN; {sql}; INSERT INTO schema_migrations (version, applied_at) VALUES ({version}, 0); COMMIT;"
        ))?;
    }
    Ok(())
}

fn write_batch(transaction: &Transaction<'_>, batch: &Batch) -> Result<(), StoreError> {
    for row in &batch.states {
        transaction.execute(
            "INSERT INTO detector_state (kind, key, stream, state) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (kind, key) DO UPDATE SET stream = excluded.stream, state = excluded.state",
            params![row.kind, row.key, row.stream, row.state],
        )?;
    }
    for event in &batch.events {
        transaction.execute(
            "INSERT OR IGNORE INTO schema_drift_events (id, project, server_name, detected_at, previous_hash,
                 current_hash, status, max_classification, max_severity, accepted_by, accepted_at, event)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                event.id,
                event.project,
                event.server_name,
                ms(event.detected_at),
                event.previous_hash,
                event.current_hash,
                name(&event.status)?,
                event.max_classification.map(|c| c.as_str()),
                event.max_severity.map(|s| s.as_str()),
                event.accepted_by,
                event.accepted_at.map(ms),
                text(event)?,
            ],
        )?;
    }
    for update in &batch.event_updates {
        transaction.execute(
            "UPDATE schema_drift_events SET status = ?2, accepted_by = ?3, accepted_at = ?4 WHERE id = ?1",
            params![
                update.id,
                name(&update.status)?,
                update.by,
                (update.status == EventStatus::Accepted).then(|| ms(update.at))
            ],
        )?;
    }
    for acceptance in &batch.acceptances {
        transaction.execute(
            "INSERT OR IGNORE INTO baseline_acceptances (id, project, server_name, previous_hash, new_hash,
                 accepted_by, accepted_at, event_ids) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                acceptance.id,
                acceptance.project,
                acceptance.server_name,
                acceptance.previous_hash,
                acceptance.new_hash,
                acceptance.accepted_by,
                ms(acceptance.accepted_at),
                text(&acceptance.event_ids)?,
            ],
        )?;
    }
    for server in &batch.servers {
        transaction.execute(
            "INSERT INTO servers (project, server_name, status, schema_hash, tool_count, last_seen, note, latency_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (project, server_name) DO UPDATE SET status = excluded.status,
                 schema_hash = excluded.schema_hash, tool_count = excluded.tool_count,
                 last_seen = excluded.last_seen, note = excluded.note, latency_ms = excluded.latency_ms",
            params![
                server.project,
                server.server_name,
                name(&server.status)?,
                server.schema_hash,
                server.tool_count,
                server.last_seen.map(ms),
                server.note,
                server.latency_ms,
            ],
        )?;
    }
    for (project, server, captured_at, hash, tools) in &batch.tool_lists {
        transaction.execute(
            "DELETE FROM tool_schemas WHERE project = ?1 AND server_name = ?2",
            params![project, server],
        )?;
        for tool in tools {
            let Some(tool_name) = tool.get("name").and_then(Value::as_str) else { continue };
            let input = tool.get("inputSchema").cloned().unwrap_or_else(|| Value::Object(Default::default()));
            transaction.execute(
                "INSERT OR REPLACE INTO tool_schemas (project, server_name, tool_name, description, input_schema,
                     captured_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    project,
                    server,
                    tool_name,
                    tool.get("description").and_then(Value::as_str),
                    text(&input)?,
                    ms(*captured_at)
                ],
            )?;
        }
        transaction.execute(
            "INSERT OR IGNORE INTO server_snapshots (project, server_name, schema_hash, captured_at, tools)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![project, server, hash, ms(*captured_at), text(tools)?],
        )?;
    }
    for notification in &batch.notifications {
        transaction.execute(
            "INSERT OR IGNORE INTO notifications (id, project, server_name, kind, at, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                notification.id,
                notification.project,
                notification.server_name,
                notification.kind.as_str(),
                ms(notification.at),
                text(notification)?
            ],
        )?;
    }
    for (identity, position, ingested_at) in &batch.call_identities {
        transaction.execute(
            "INSERT OR IGNORE INTO call_identities (identity, partition, offset, ingested_at) VALUES (?1, ?2, ?3, ?4)",
            params![identity, position.partition, position.offset as i64, ms(*ingested_at)],
        )?;
    }
    for (id, call) in &batch.calls {
        transaction.execute(
            "INSERT OR IGNORE INTO tool_calls (id, project, server, tool, span_id, session_id, agent_name,
                 started_at, ingested_at, duration_ms, status, error, shape_outcome, shape_hash, compact_bytes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            params![
                id,
                call.project.as_str(),
                call.server.as_str(),
                call.tool.as_str(),
                call.span_id,
                call.session_id,
                call.agent_name,
                ms(call.started_at),
                ms(call.ingested_at),
                call.duration_ms,
                name(&call.status)?,
                call.error,
                call.shape_outcome.as_str(),
                call.shape_hash,
                call.compact_bytes.map(|b| b as i64),
            ],
        )?;
    }
    for signal in &batch.signals {
        transaction.execute(
            "INSERT OR IGNORE INTO shape_drift_signals (id, project, server, tool, detected_at, shape_hash, signal)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                signal.id,
                signal.project,
                signal.server,
                signal.tool,
                ms(signal.detected_at),
                signal.shape_hash,
                text(signal)?
            ],
        )?;
    }
    for row in &batch.tool_shapes {
        transaction.execute(
            "INSERT INTO tool_shapes (project, server, tool, shape) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (project, server, tool) DO UPDATE SET shape = excluded.shape",
            params![row.project, row.shape.server, row.shape.tool, text(&row.shape)?],
        )?;
    }
    for (project, thresholds) in &batch.settings {
        transaction.execute(
            "INSERT INTO settings (project, thresholds) VALUES (?1, ?2)
             ON CONFLICT (project) DO UPDATE SET thresholds = excluded.thresholds",
            params![project, text(thresholds)?],
        )?;
    }
    for (id, at, result) in &batch.applied_commands {
        transaction.execute(
            "INSERT OR IGNORE INTO applied_commands (id, applied_at, result) VALUES (?1, ?2, ?3)",
            params![id, ms(*at), text(result)?],
        )?;
    }
    for (partition, offset) in &batch.positions {
        transaction.execute(
            "INSERT INTO consumer_positions (consumer, partition, offset) VALUES (?1, ?2, ?3)
             ON CONFLICT (consumer, partition) DO UPDATE SET offset = excluded.offset",
            params![WORKER, partition, *offset as i64],
        )?;
    }
    Ok(())
}

fn open_counts(
    connection: &Connection,
    project: &str,
) -> Result<HashMap<String, views::OpenDrift>, StoreError> {
    let mut select = connection.prepare_cached(
        "SELECT server_name, max_classification, max_severity FROM schema_drift_events
         WHERE project = ?1 AND status = 'open'",
    )?;
    let events = select
        .query_map(params![project], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    let mut select = connection.prepare_cached(
        "SELECT e.server_name, json_extract(c.value, '$.classification'), COUNT(*)
         FROM schema_drift_events e, json_each(e.event, '$.changes') c
         WHERE e.project = ?1 AND e.status = 'open' GROUP BY 1, 2",
    )?;
    let changes = select
        .query_map(params![project], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(views::open_counts(events, changes))
}

fn signal_groups(
    connection: &Connection,
    project: &str,
    filter: &str,
    args: &[&dyn rusqlite::ToSql],
) -> Result<Vec<SignalGroup>, StoreError> {
    let sql = format!(
        "SELECT signal FROM shape_drift_signals WHERE project = ?1 {filter} ORDER BY detected_at, id"
    );
    let mut select = connection.prepare(&sql)?;
    let mut all_args: Vec<&dyn rusqlite::ToSql> = vec![&project];
    all_args.extend_from_slice(args);
    let rows = select.query_map(all_args.as_slice(), |row| row.get::<_, String>(0))?;
    views::signal_groups(rows.collect::<Result<Vec<_>, _>>()?)
}

#[async_trait]
impl DetectorStore for SqliteStore {
    async fn apply(&self, batch: Batch) -> Result<(), StoreError> {
        Self::with(&self.writer, move |connection| {
            let transaction = connection.transaction()?;
            write_batch(&transaction, &batch)?;
            transaction.commit()?;
            Ok(())
        })
        .await
    }

    async fn resume(&self, streams: Streams<'_>) -> Result<Resume, StoreError> {
        let only: Option<Vec<u32>> = match streams {
            Streams::All => None,
            Streams::Only(streams) => Some(streams.to_vec()),
        };
        Self::with(&self.writer, move |connection| {
            let wanted = |stream: u32| only.as_ref().is_none_or(|only| only.contains(&stream));
            let mut select =
                connection.prepare("SELECT partition, offset FROM consumer_positions WHERE consumer = ?1")?;
            let positions = select
                .query_map(params![WORKER], |row| Ok((row.get::<_, u32>(0)?, row.get::<_, i64>(1)? as u64)))?
                .collect::<Result<Vec<(u32, u64)>, _>>()?
                .into_iter()
                .filter(|(stream, _)| wanted(*stream))
                .collect();
            let mut select = connection.prepare("SELECT kind, key, stream, state FROM detector_state")?;
            let states = select
                .query_map([], |row| {
                    Ok(DetectorState {
                        kind: row.get(0)?,
                        key: row.get(1)?,
                        stream: row.get(2)?,
                        state: row.get(3)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .filter(|state| wanted(state.stream))
                .collect();
            let mut select = connection.prepare("SELECT project, thresholds FROM settings")?;
            let rows: Vec<(String, String)> =
                select.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?.collect::<Result<_, _>>()?;
            let settings = rows
                .into_iter()
                .map(|(project, json)| Ok((project, serde_json::from_str(&json)?)))
                .collect::<Result<_, StoreError>>()?;
            Ok(Resume { positions, states, settings })
        })
        .await
    }

    async fn stored_calls(
        &self,
        identities: &[String],
        since: Timestamp,
    ) -> Result<HashMap<String, InputPosition>, StoreError> {
        let identities = identities.to_vec();
        self.read(move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT partition, offset FROM call_identities WHERE identity = ?1 AND ingested_at >= ?2",
            )?;
            let mut stored = HashMap::new();
            for identity in identities {
                let found = select
                    .query_row(params![identity, ms(since)], |row| {
                        Ok(InputPosition { partition: row.get(0)?, offset: row.get::<_, i64>(1)? as u64 })
                    })
                    .optional()?;
                if let Some(position) = found {
                    stored.insert(identity, position);
                }
            }
            Ok(stored)
        })
        .await
    }
}

#[async_trait]
impl QueryStore for SqliteStore {
    async fn servers(&self, project: &str) -> Result<Vec<ServerHealth>, StoreError> {
        let project = project.to_owned();
        self.read(move |connection| {
            let open = open_counts(connection, &project)?;
            let mut select = connection.prepare_cached(
                "SELECT server_name, status, schema_hash, tool_count, last_seen, note, latency_ms FROM servers
                 WHERE project = ?1 ORDER BY server_name",
            )?;
            let rows = select.query_map(params![project], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, Option<String>>(2)?,
                    row.get::<_, u32>(3)?,
                    row.get::<_, Option<i64>>(4)?,
                    row.get::<_, Option<String>>(5)?,
                    row.get::<_, Option<f64>>(6)?,
                ))
            })?;
            let mut servers = Vec::new();
            for row in rows {
                let (server_name, status, schema_hash, tool_count, last_seen, note, latency_ms) = row?;
                let open = open.get(&server_name).cloned().unwrap_or_default();
                servers.push(ServerHealth {
                    status: parse_name::<ServerStatus>(&status)?,
                    schema_hash,
                    tool_count,
                    last_seen: last_seen.map(timestamp).transpose()?,
                    latency_ms,
                    open_drift: open.events,
                    open_changes: open.changes,
                    max_severity: open.max_severity.as_deref().map(parse_name).transpose()?,
                    note,
                    server_name,
                    contract_mismatches: Vec::new(),
                });
            }
            let mut traced =
                connection.prepare_cached("SELECT DISTINCT server FROM tool_shapes WHERE project = ?1")?;
            let traced = traced.query_map(params![project], |row| row.get::<_, String>(0))?;
            let servers = views::with_trace_only_servers(servers, traced.collect::<Result<_, _>>()?);
            // The LIKE only narrows the rows read; the JSON decides.
            let mut mismatched = connection.prepare_cached(
                "SELECT server, tool, shape FROM tool_shapes WHERE project = ?1 AND shape LIKE '%\"mismatch\"%'",
            )?;
            let mismatched = mismatched.query_map(params![project], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?, row.get::<_, String>(2)?))
            })?;
            let mismatched = views::contract_mismatches(mismatched.collect::<Result<Vec<_>, _>>()?)?;
            Ok(views::with_contract_mismatches(servers, mismatched))
        })
        .await
    }

    async fn drift_history(
        &self,
        project: &str,
        server: &str,
        limit: u32,
    ) -> Result<Vec<SchemaDriftEvent>, StoreError> {
        let (project, server) = (project.to_owned(), server.to_owned());
        self.read(move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT event, status, accepted_by, accepted_at FROM schema_drift_events
                 WHERE project = ?1 AND server_name = ?2 ORDER BY detected_at DESC, id DESC LIMIT ?3",
            )?;
            let rows = select.query_map(params![project, server, limit], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, Option<String>>(2)?,
                    row.get::<_, Option<i64>>(3)?,
                ))
            })?;
            let mut events = Vec::new();
            for row in rows {
                let (json, status, accepted_by, accepted_at) = row?;
                let mut event: SchemaDriftEvent = serde_json::from_str(&json)?;
                // The lifecycle columns are updated in place; the stored JSON is the event as detected.
                event.status = parse_name(&status)?;
                event.accepted_by = accepted_by;
                event.accepted_at = accepted_at.map(timestamp).transpose()?;
                events.push(event);
            }
            Ok(events)
        })
        .await
    }

    async fn drift_impact(&self, query: ImpactQuery<'_>) -> Result<DriftImpact, StoreError> {
        let (project, server, tool) =
            (query.project.to_owned(), query.server.to_owned(), query.tool.to_owned());
        let from = since(query.now, query.hours);
        let (events, agents, total_sessions) = self
            .read(move |connection| {
                let mut select = connection.prepare_cached(
                    "SELECT event FROM schema_drift_events WHERE project = ?1 AND server_name = ?2 AND status = 'open'",
                )?;
                let events: Vec<String> =
                    select.query_map(params![project, server], |row| row.get(0))?.collect::<Result<_, _>>()?;
                let mut select = connection.prepare_cached(
                    "SELECT COALESCE(agent_name, 'unknown'), COUNT(DISTINCT session_id), COUNT(*),
                            SUM(CASE WHEN status = 'error' THEN 1 ELSE 0 END), AVG(duration_ms), MAX(ingested_at)
                     FROM tool_calls WHERE project = ?1 AND server = ?2 AND tool = ?3 AND ingested_at >= ?4
                     GROUP BY 1 ORDER BY 3 DESC, 1",
                )?;
                let agents: Vec<views::AgentStats> = select
                    .query_map(params![project, server, tool, from], |row| {
                        Ok((
                            row.get::<_, String>(0)?,
                            row.get::<_, i64>(1)? as u64,
                            row.get::<_, i64>(2)? as u64,
                            row.get::<_, i64>(3)? as u64,
                            row.get::<_, f64>(4)?,
                            row.get::<_, i64>(5)?,
                        ))
                    })?
                    .collect::<Result<_, _>>()?;
                let total_sessions: i64 = connection.query_row(
                    "SELECT COUNT(DISTINCT session_id) FROM tool_calls
                     WHERE project = ?1 AND server = ?2 AND tool = ?3 AND ingested_at >= ?4",
                    params![project, server, tool, from],
                    |row| row.get(0),
                )?;
                Ok((events, agents, total_sessions as u64))
            })
            .await?;
        views::drift_impact(&query, events, agents, total_sessions)
    }

    async fn tool_schemas(&self, project: &str, server: &str) -> Result<Vec<ToolSchema>, StoreError> {
        let (project, server) = (project.to_owned(), server.to_owned());
        self.read(move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT tool_name, description, input_schema, captured_at FROM tool_schemas
                 WHERE project = ?1 AND server_name = ?2 ORDER BY tool_name",
            )?;
            let rows = select.query_map(params![project, server], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, Option<String>>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, i64>(3)?,
                ))
            })?;
            let mut tools = Vec::new();
            for row in rows {
                let (tool_name, description, input, captured_at) = row?;
                tools.push(ToolSchema {
                    server_name: server.clone(),
                    tool_name,
                    description,
                    input_schema: serde_json::from_str(&input)?,
                    captured_at: timestamp(captured_at)?,
                });
            }
            Ok(tools)
        })
        .await
    }

    async fn tools(&self, project: &str, hours: u32, now: Timestamp) -> Result<Vec<ToolSummary>, StoreError> {
        let project = project.to_owned();
        let from = since(now, hours);
        self.read(move |connection| {
            let mut select =
                connection.prepare_cached("SELECT server_name, tool_name FROM tool_schemas WHERE project = ?1")?;
            let declared: BTreeSet<(String, String)> =
                select.query_map(params![project], |row| Ok((row.get(0)?, row.get(1)?)))?.collect::<Result<_, _>>()?;
            let mut shapes = HashMap::new();
            let mut select =
                connection.prepare_cached("SELECT server, tool, shape FROM tool_shapes WHERE project = ?1")?;
            for row in select.query_map(params![project], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?, row.get::<_, String>(2)?))
            })? {
                let (server, tool, json) = row?;
                shapes.insert((server, tool), views::shape_status(&json)?);
            }
            let mut select = connection.prepare_cached(
                "SELECT server, tool, COUNT(*), SUM(CASE WHEN status = 'error' THEN 1 ELSE 0 END), AVG(duration_ms),
                        MAX(ingested_at)
                 FROM tool_calls WHERE project = ?1 AND ingested_at >= ?2 GROUP BY server, tool ORDER BY server, tool",
            )?;
            let calls: Vec<views::CallStats> = select
                .query_map(params![project, from], |row| {
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get::<_, i64>(2)? as u64,
                        row.get::<_, i64>(3)? as u64,
                        row.get(4)?,
                        row.get(5)?,
                    ))
                })?
                .collect::<Result<_, _>>()?;
            views::tool_summaries(&declared, shapes, calls)
        })
        .await
    }

    async fn tool_shape(
        &self,
        project: &str,
        server: &str,
        tool: &str,
    ) -> Result<Option<ToolShape>, StoreError> {
        let (project, server, tool) = (project.to_owned(), server.to_owned(), tool.to_owned());
        self.read(move |connection| {
            let json: Option<String> = connection
                .query_row(
                    "SELECT shape FROM tool_shapes WHERE project = ?1 AND server = ?2 AND tool = ?3",
                    params![project, server, tool],
                    |row| row.get(0),
                )
                .optional()?;
            let Some(json) = json else { return Ok(None) };
            let mut shape: ToolShape = serde_json::from_str(&json)?;
            shape.signal_groups =
                signal_groups(connection, &project, "AND server = ?2 AND tool = ?3", &[&server, &tool])?;
            Ok(Some(shape))
        })
        .await
    }

    async fn shape_drift(
        &self,
        project: &str,
        hours: u32,
        now: Timestamp,
    ) -> Result<Vec<SignalGroup>, StoreError> {
        let project = project.to_owned();
        let from = since(now, hours);
        self.read(move |connection| signal_groups(connection, &project, "AND detected_at >= ?2", &[&from]))
            .await
    }

    async fn thresholds(&self, project: &str) -> Result<Option<DetectorThresholds>, StoreError> {
        let project = project.to_owned();
        self.read(move |connection| {
            let json: Option<String> = connection
                .query_row("SELECT thresholds FROM settings WHERE project = ?1", params![project], |row| {
                    row.get(0)
                })
                .optional()?;
            json.map(|j| serde_json::from_str(&j).map_err(StoreError::from)).transpose()
        })
        .await
    }

    async fn return_value_stats(
        &self,
        project: &str,
        hours: u32,
        now: Timestamp,
    ) -> Result<ReturnValueStats, StoreError> {
        let project = project.to_owned();
        let from = since(now, hours);
        let rows = self
            .read(move |connection| {
                let mut select = connection.prepare_cached(
                    "SELECT server, tool, status, shape_outcome, COUNT(*) FROM tool_calls
                     WHERE project = ?1 AND ingested_at >= ?2 GROUP BY server, tool, status, shape_outcome",
                )?;
                let rows = select
                    .query_map(params![project, from], |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get::<_, i64>(4)? as u64))
                    })?
                    .collect::<Result<_, _>>()?;
                Ok(rows)
            })
            .await?;
        Ok(views::return_value_stats(hours, rows))
    }

    async fn call_buckets(&self, query: BucketQuery<'_>) -> Result<Vec<CallBucket>, StoreError> {
        let (project, server) = (query.project.to_owned(), query.server.to_owned());
        let tool = query.tool.map(str::to_owned);
        let (from, to, bucket) = (ms(query.from), ms(query.to), query.bucket_ms);
        let owned = BucketQuery { project: "", server: "", tool: None, ..query };
        self.read(move |connection| {
            let scope = "FROM tool_calls WHERE project = ?1 AND server = ?2 AND (?3 IS NULL OR tool = ?3)
                         AND started_at >= ?4 AND started_at < ?5";
            let args = params![project, server, tool, from, to, bucket];
            let mut aggregates: BTreeMap<i64, views::BucketAggregate> = BTreeMap::new();
            let mut select = connection.prepare_cached(&format!(
                "SELECT (started_at - ?4) / ?6, COUNT(*), SUM(status = 'error'),
                        SUM(shape_outcome = 'fingerprinted' AND shape_hash IS NOT NULL) {scope} GROUP BY 1"
            ))?;
            let rows = select.query_map(args, |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, i64>(3)?,
                ))
            })?;
            for row in rows {
                let (index, calls, errors, fingerprinted) = row?;
                let aggregate = aggregates.entry(index).or_default();
                aggregate.calls = calls as u64;
                aggregate.errors = errors as u64;
                aggregate.fingerprinted = fingerprinted as u64;
            }
            let mut select = connection.prepare_cached(&format!(
                "SELECT k, MAX(n) FROM (SELECT (started_at - ?4) / ?6 AS k, COUNT(*) AS n {scope}
                    AND shape_outcome = 'fingerprinted' AND shape_hash IS NOT NULL GROUP BY k, shape_hash)
                 GROUP BY k"
            ))?;
            for row in select.query_map(args, |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?)))? {
                let (index, dominant) = row?;
                aggregates.entry(index).or_default().dominant = dominant as u64;
            }
            // Percentiles by nearest rank, streaming the sorted durations: memory per bucket, not per call.
            let mut select = connection.prepare_cached(&format!(
                "SELECT (started_at - ?4) / ?6 AS k, duration_ms {scope} ORDER BY k, duration_ms"
            ))?;
            let mut rows = select.query(args)?;
            let (mut current, mut rank) = (i64::MIN, 0u64);
            while let Some(row) = rows.next()? {
                let (index, duration): (i64, f64) = (row.get(0)?, row.get(1)?);
                if index != current {
                    (current, rank) = (index, 0);
                }
                rank += 1;
                let Some(aggregate) = aggregates.get_mut(&index) else { continue };
                if rank == views::nearest_rank(aggregate.calls, 0.5) {
                    aggregate.p50_ms = Some(duration);
                }
                if rank == views::nearest_rank(aggregate.calls, 0.95) {
                    aggregate.p95_ms = Some(duration);
                }
            }
            views::call_buckets(&owned, aggregates)
        })
        .await
    }

    async fn signals(
        &self,
        project: &str,
        server: &str,
        tool: Option<&str>,
        from: Timestamp,
    ) -> Result<Vec<ShapeDriftSignal>, StoreError> {
        let (project, server, tool, from) =
            (project.to_owned(), server.to_owned(), tool.map(str::to_owned), ms(from));
        self.read(move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT signal FROM shape_drift_signals
                 WHERE project = ?1 AND server = ?2 AND (?3 IS NULL OR tool = ?3) AND detected_at >= ?4
                 ORDER BY detected_at, id",
            )?;
            let rows =
                select.query_map(params![project, server, tool, from], |row| row.get::<_, String>(0))?;
            views::signals(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    async fn command_result(&self, id: &str) -> Result<Option<Value>, StoreError> {
        let id = id.to_owned();
        self.read(move |connection| {
            let json: Option<String> = connection
                .query_row("SELECT result FROM applied_commands WHERE id = ?1", params![id], |row| row.get(0))
                .optional()?;
            json.map(|j| serde_json::from_str(&j).map_err(StoreError::from)).transpose()
        })
        .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.read(|connection| {
            Ok(connection.query_row("SELECT 1", [], |row| row.get::<_, i64>(0)).map(|_| ())?)
        })
        .await
    }
}

#[async_trait]
impl NotificationStore for SqliteStore {
    async fn pending_notifications(
        &self,
        webhook: &str,
        since: Timestamp,
        limit: usize,
    ) -> Result<Vec<Notification>, StoreError> {
        let webhook = webhook.to_owned();
        self.read(move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT body FROM notifications n WHERE at >= ?1
                 AND NOT EXISTS (SELECT 1 FROM notifications_sent s WHERE s.webhook = ?2 AND s.id = n.id)
                 ORDER BY at, id LIMIT ?3",
            )?;
            let bodies: Vec<String> = select
                .query_map(params![ms(since), webhook, limit as i64], |row| row.get(0))?
                .collect::<Result<_, _>>()?;
            bodies.iter().map(|body| serde_json::from_str(body).map_err(StoreError::from)).collect()
        })
        .await
    }

    async fn record_notified(
        &self,
        webhook: &str,
        id: &str,
        outcome: &str,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        let (webhook, id, outcome) = (webhook.to_owned(), id.to_owned(), outcome.to_owned());
        Self::with(&self.writer, move |connection| {
            connection.execute(
                "INSERT OR REPLACE INTO notifications_sent (webhook, id, outcome, sent_at) VALUES (?1, ?2, ?3, ?4)",
                params![webhook, id, outcome, ms(at)],
            )?;
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use driftline_bus::Positions;

    use super::*;

    #[tokio::test]
    async fn an_upgraded_store_keeps_its_position_and_reapplies_nothing() {
        let dir = std::env::temp_dir().join(format!("driftline-store-upgrade-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("driftline.db");
        {
            // A store written by version 1 of the schema, with a stored position.
            let old = Connection::open(&path).expect("open");
            old.execute_batch(&format!(
                "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
                 {} ; INSERT INTO schema_migrations VALUES (1, 0);
                 INSERT INTO consumer_offsets (consumer, partition, offset) VALUES ('detectors', 0, 42);",
                MIGRATIONS[0]
            ))
            .expect("version 1");
        }
        let store = SqliteStore::open(&path).expect("upgrade");
        let resume = store.resume(Streams::All).await.expect("resume");
        assert_eq!(resume.positions, Positions::from([(0, 42)]));
        drop(store);
        // Opening again applies nothing twice.
        let store = SqliteStore::open(&path).expect("reopen");
        assert_eq!(store.resume(Streams::All).await.expect("resume").positions, Positions::from([(0, 42)]));
    }

    #[tokio::test]
    async fn offsets_beyond_32_bits_round_trip() {
        let dir = std::env::temp_dir().join(format!("driftline-store-offsets-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let store = SqliteStore::open(&dir.join("driftline.db")).expect("open");
        let far = (1u64 << 32) + 17;
        let batch = Batch {
            positions: Positions::from([(3, far), (65_536, u64::from(u32::MAX))]),
            ..Default::default()
        };
        store.apply(batch).await.expect("apply");
        let resume = store.resume(Streams::All).await.expect("resume");
        assert_eq!(resume.positions, Positions::from([(3, far), (65_536, u64::from(u32::MAX))]));
    }
}
