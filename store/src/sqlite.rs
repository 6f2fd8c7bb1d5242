//! The embedded store: SQLite (bundled), WAL, versioned migrations from `schemas/sqlite/`. One writer
//! connection (the worker) and one reader connection (the API), so queries never wait on a write.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use driftline_schemas::api::{
    CallBucket, DeadLetterCount, DriftImpact, RecentCall, ReturnValueStats, ServerHealth, SignalGroup,
    ToolSchema, ToolShape, ToolSummary,
};
use driftline_schemas::{
    DetectorThresholds, EventStatus, InputPosition, Notification, SchemaDriftEvent, ServerStatus,
    ServerSurfaces, ShapeDriftSignal, Timestamp, ToolKey,
};
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde_json::Value;

use crate::retention;
use crate::rollup::{self, Rollup, RollupKey};
use crate::views::{self, ms, name, parse_name, text, timestamp};
use crate::{
    Batch, BucketQuery, DetectorState, DetectorStore, Forgotten, ImpactQuery, NotificationStore, QueryStore,
    Resume, StoreError, StoredToolList, Streams,
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
    include_str!("../../schemas/sqlite/0008_rollups.sql"),
    include_str!("../../schemas/sqlite/0009_append_keys.sql"),
    include_str!("../../schemas/sqlite/0010_expiry.sql"),
    include_str!("../../schemas/sqlite/0011_surfaces.sql"),
];
const WORKER: &str = "detectors";

#[derive(Clone)]
pub struct SqliteStore {
    writer: Arc<Mutex<Connection>>,
    reader: Arc<Mutex<Connection>>,
    /// The detector's lookups of stored calls, which run while its previous batch is being written.
    lookup: Arc<Mutex<Connection>>,
    /// The database file (its write-ahead log beside it), synced by [`DetectorStore::sync`].
    path: Arc<Path>,
}

impl SqliteStore {
    /// Opens the store at `path`, applying any migration not yet applied.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let writer = Connection::open(path)?;
        writer.pragma_update(None, "journal_mode", "WAL")?;
        // No fsync per batch: the bus keeps FULL, and what a power cut takes from here (outputs, state and
        // position, together) is read again from it (ARCHITECTURE.md, invariants).
        writer.pragma_update(None, "synchronous", "NORMAL")?;
        // 128 MiB of pages (SQLite's default is 2 MiB): the identity index is random by nature and every
        // batch touches pages all over it.
        writer.pragma_update(None, "cache_size", -131_072)?;
        writer.busy_timeout(Duration::from_secs(5))?;
        // Checkpoints every 10,000 pages instead of 1,000: the identity pages every batch touches are copied
        // back once per checkpoint, not ten times (detector on a 670,000-span backlog, before calls were
        // keyed by position: ≈13,700 → ≈15,300 spans/s). The WAL grows to ≈40 MB between them.
        writer.pragma_update(None, "wal_autocheckpoint", 10_000)?;
        migrate(&writer)?;
        let reader = Connection::open(path)?;
        reader.busy_timeout(Duration::from_secs(5))?;
        let lookup = Connection::open(path)?;
        lookup.busy_timeout(Duration::from_secs(5))?;
        // Another connection's commit empties this one's page cache: pages of the database file are read
        // through a mapping instead of copied in.
        lookup.pragma_update(None, "mmap_size", 1i64 << 30)?;
        Ok(SqliteStore {
            writer: Arc::new(Mutex::new(writer)),
            reader: Arc::new(Mutex::new(reader)),
            lookup: Arc::new(Mutex::new(lookup)),
            path: Arc::from(path),
        })
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

/// Removes forgotten keys' state and the rows that show them — after the batch's other rows, so a row the
/// batch itself wrote for a key it then forgot goes too.
fn forget(transaction: &Transaction<'_>, batch: &Batch) -> Result<(), StoreError> {
    for forgotten in &batch.forgotten {
        let (kind, key) = forgotten.state_key();
        transaction
            .prepare_cached("DELETE FROM detector_state WHERE kind = ?1 AND key = ?2")?
            .execute(params![kind, key])?;
        match forgotten {
            Forgotten::Tool(tool) => {
                transaction
                    .prepare_cached(
                        "DELETE FROM tool_shapes WHERE project = ?1 AND server = ?2 AND tool = ?3",
                    )?
                    .execute(params![tool.project.as_str(), tool.server.as_str(), tool.tool.as_str()])?;
            }
            Forgotten::Server(server) => {
                for table in ["servers", "tool_schemas"] {
                    transaction
                        .prepare_cached(&format!(
                            "DELETE FROM {table} WHERE project = ?1 AND server_name = ?2"
                        ))?
                        .execute(params![server.project.as_str(), server.server.as_str()])?;
                }
            }
        }
    }
    Ok(())
}

fn write_batch(transaction: &Transaction<'_>, batch: &Batch) -> Result<(), StoreError> {
    for row in &batch.states {
        transaction
            .prepare_cached(
                "INSERT INTO detector_state (kind, key, stream, state) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (kind, key) DO UPDATE SET stream = excluded.stream, state = excluded.state",
            )?
            .execute(params![row.kind, row.key, row.stream, row.state])?;
    }
    for event in &batch.events {
        transaction.prepare_cached(
            "INSERT OR IGNORE INTO schema_drift_events (id, project, server_name, detected_at, previous_hash,
                 current_hash, status, max_classification, max_severity, accepted_by, accepted_at, event)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        )?.execute(
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
        transaction.prepare_cached(
            "UPDATE schema_drift_events SET status = ?2, accepted_by = ?3, accepted_at = ?4 WHERE id = ?1",
        )?.execute(
            params![
                update.id,
                name(&update.status)?,
                update.by,
                (update.status == EventStatus::Accepted).then(|| ms(update.at))
            ],
        )?;
    }
    for acceptance in &batch.acceptances {
        transaction.prepare_cached(
            "INSERT OR IGNORE INTO baseline_acceptances (id, project, server_name, previous_hash, new_hash,
                 accepted_by, accepted_at, event_ids) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?.execute(
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
        transaction.prepare_cached(
            "INSERT INTO servers (project, server_name, status, schema_hash, tool_count, last_seen, note, latency_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (project, server_name) DO UPDATE SET status = excluded.status,
                 schema_hash = excluded.schema_hash, tool_count = excluded.tool_count,
                 last_seen = excluded.last_seen, note = excluded.note, latency_ms = excluded.latency_ms",
        )?.execute(
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
    for StoredToolList { project, server, captured_at, hash, tools, surfaces } in &batch.tool_lists {
        transaction
            .prepare_cached("DELETE FROM tool_schemas WHERE project = ?1 AND server_name = ?2")?
            .execute(params![project, server])?;
        for tool in tools.declared() {
            let input = tool.input_schema.unwrap_or_else(|| Value::Object(Default::default()));
            transaction.prepare_cached(
                "INSERT OR REPLACE INTO tool_schemas (project, server_name, tool_name, description, input_schema,
                     captured_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?.execute(
                params![
                    project,
                    server,
                    tool.name,
                    tool.description,
                    text(&input)?,
                    ms(*captured_at)
                ],
            )?;
        }
        transaction
            .prepare_cached(
                // A list seen again (changed back) is as new as its latest capture.
                "INSERT INTO server_snapshots (project, server_name, schema_hash, captured_at, tools, surfaces)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (project, server_name, schema_hash)
             DO UPDATE SET captured_at = max(captured_at, excluded.captured_at)",
            )?
            .execute(params![
                project,
                server,
                hash,
                ms(*captured_at),
                text(tools)?,
                surfaces.as_deref().map(text).transpose()?
            ])?;
    }
    for notification in &batch.notifications {
        transaction
            .prepare_cached(
                "INSERT OR IGNORE INTO notifications (id, project, server_name, kind, at, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                notification.id,
                notification.project,
                notification.server_name,
                notification.kind.as_str(),
                ms(notification.at),
                text(notification)?
            ])?;
    }
    for (identity, position, ingested_at) in &batch.call_identities {
        transaction.prepare_cached(
            "INSERT OR IGNORE INTO call_identities (identity, partition, offset, ingested_at) VALUES (?1, ?2, ?3, ?4)",
        )?.execute(
            params![identity_key(identity), position.partition, position.offset as i64, ms(*ingested_at)],
        )?;
    }
    write_rollups(transaction, &batch.rollups)?;
    for (id, position, call) in &batch.calls {
        transaction.prepare_cached(
            "INSERT OR IGNORE INTO tool_calls (partition, offset, id, project, server, tool, span_id, session_id,
                 agent_name, started_at, ingested_at, duration_ms, status, error, shape_outcome, shape_hash,
                 compact_bytes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
        )?.execute(
            params![
                position.partition,
                position.offset as i64,
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
        transaction.prepare_cached(
            "INSERT OR IGNORE INTO shape_drift_signals (id, project, server, tool, detected_at, shape_hash, signal)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?.execute(
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
        transaction
            .prepare_cached(
                "INSERT INTO tool_shapes (project, server, tool, shape) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (project, server, tool) DO UPDATE SET shape = excluded.shape",
            )?
            .execute(params![row.project, row.shape.server, row.shape.tool, text(&row.shape)?])?;
    }
    for (project, thresholds) in &batch.settings {
        transaction
            .prepare_cached(
                "INSERT INTO settings (project, thresholds) VALUES (?1, ?2)
             ON CONFLICT (project) DO UPDATE SET thresholds = excluded.thresholds",
            )?
            .execute(params![project, text(thresholds)?])?;
    }
    for (id, at, result) in &batch.applied_commands {
        transaction
            .prepare_cached(
                "INSERT OR IGNORE INTO applied_commands (id, applied_at, result) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![id, ms(*at), text(result)?])?;
    }
    for (partition, offset) in &batch.positions {
        transaction
            .prepare_cached(
                "INSERT INTO consumer_positions (consumer, partition, offset) VALUES (?1, ?2, ?3)
             ON CONFLICT (consumer, partition) DO UPDATE SET offset = excluded.offset",
            )?
            .execute(params![WORKER, partition, *offset as i64])?;
    }
    Ok(())
}

/// A call identity as stored: its 16 bytes when it is the 32 hex digits a call's identity is, else the text
/// itself (SQLite never finds text equal to a blob, so the two cannot meet).
/// A text column, borrowed from the row.
fn text_at<'r>(row: &'r rusqlite::Row<'_>, column: usize) -> Result<&'r str, rusqlite::Error> {
    row.get_ref(column)?.as_str().map_err(|err| {
        rusqlite::Error::FromSqlConversionFailure(column, rusqlite::types::Type::Text, Box::new(err))
    })
}

/// A stored event (`event, status, accepted_by, accepted_at`): the JSON is the event as detected, the
/// lifecycle columns are updated in place.
fn event_from_row(json: &str, row: &rusqlite::Row<'_>) -> Result<SchemaDriftEvent, StoreError> {
    let mut event: SchemaDriftEvent = serde_json::from_str(json)?;
    event.status = parse_name(&row.get::<_, String>(1)?)?;
    event.accepted_by = row.get(2)?;
    event.accepted_at = row.get::<_, Option<i64>>(3)?.map(timestamp).transpose()?;
    Ok(event)
}

fn identity_key(identity: &str) -> rusqlite::types::Value {
    let mut bytes = [0u8; 16];
    match hex::decode_to_slice(identity, &mut bytes) {
        Ok(()) => rusqlite::types::Value::Blob(bytes.to_vec()),
        Err(_) => rusqlite::types::Value::Text(identity.to_owned()),
    }
}

fn sort_bytes(key: &rusqlite::types::Value) -> (bool, &[u8]) {
    match key {
        rusqlite::types::Value::Blob(bytes) => (true, bytes.as_slice()),
        rusqlite::types::Value::Text(text) => (false, text.as_bytes()),
        _ => (false, &[]),
    }
}

const TOOL_ROLLUP_COLUMNS: &str = "project, server, tool, bucket_seconds, bucket_ms, through_partition,
    through_offset, calls, errors, duration_sum, last_call_ms, fingerprinted, oversized, truncated_sentinel,
    unparseable, too_deep, absent, not_success, latency, shapes";
const AGENT_ROLLUP_COLUMNS: &str =
    "project, server, tool, bucket_seconds, bucket_ms, agent, through_partition,
    through_offset, calls, errors, duration_sum, last_call_ms, sessions";

/// Rollup rows replace what the store holds (they only grow: a row with fewer calls is never written
/// over one with more).
fn write_rollups(transaction: &Transaction<'_>, rows: &[Rollup]) -> Result<(), StoreError> {
    let mut tool = transaction.prepare_cached(&format!(
        "INSERT INTO tool_rollups ({TOOL_ROLLUP_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12,
             ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)
         ON CONFLICT (project, bucket_seconds, bucket_ms, server, tool) DO UPDATE SET
             through_partition = excluded.through_partition, through_offset = excluded.through_offset,
             calls = excluded.calls, errors = excluded.errors, duration_sum = excluded.duration_sum,
             last_call_ms = excluded.last_call_ms, fingerprinted = excluded.fingerprinted,
             oversized = excluded.oversized, truncated_sentinel = excluded.truncated_sentinel,
             unparseable = excluded.unparseable, too_deep = excluded.too_deep, absent = excluded.absent,
             not_success = excluded.not_success, latency = excluded.latency, shapes = excluded.shapes
         WHERE excluded.calls >= tool_rollups.calls"
    ))?;
    let mut agent = transaction.prepare_cached(&format!(
        "INSERT INTO agent_rollups ({AGENT_ROLLUP_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
         ON CONFLICT (project, server, tool, bucket_seconds, bucket_ms, agent) DO UPDATE SET
             through_partition = excluded.through_partition, through_offset = excluded.through_offset,
             calls = excluded.calls, errors = excluded.errors, duration_sum = excluded.duration_sum,
             last_call_ms = excluded.last_call_ms, sessions = excluded.sessions
         WHERE excluded.calls >= agent_rollups.calls"
    ))?;
    for row in rows {
        let Some(through) = row.through else { continue };
        let key = &row.key;
        let seconds = key.granularity_ms / 1000;
        match &key.agent {
            None => {
                let o = row.outcomes.map(|n| n as i64);
                tool.execute(params![
                    key.project,
                    key.server,
                    key.tool,
                    seconds,
                    key.bucket_ms,
                    through.partition,
                    through.offset as i64,
                    row.calls as i64,
                    row.errors as i64,
                    row.duration_sum_ms,
                    row.last_call_ms,
                    o[0],
                    o[1],
                    o[2],
                    o[3],
                    o[4],
                    o[5],
                    o[6],
                    row.latency.encode(),
                    row.shapes.encode(),
                ])?;
            }
            Some(name) => {
                agent.execute(params![
                    key.project,
                    key.server,
                    key.tool,
                    seconds,
                    key.bucket_ms,
                    name,
                    through.partition,
                    through.offset as i64,
                    row.calls as i64,
                    row.errors as i64,
                    row.duration_sum_ms,
                    row.last_call_ms,
                    row.sessions.encode(),
                ])?;
            }
        }
    }
    Ok(())
}

/// The stored rows of `keys` (point lookups by primary key).
fn read_rollups(connection: &Connection, keys: &[RollupKey]) -> Result<Vec<Rollup>, StoreError> {
    let mut tool = connection.prepare_cached(&format!(
        "SELECT {TOOL_ROLLUP_COLUMNS} FROM tool_rollups
         WHERE project = ?1 AND bucket_seconds = ?2 AND bucket_ms = ?3 AND server = ?4 AND tool = ?5"
    ))?;
    let mut agent = connection.prepare_cached(&format!(
        "SELECT {AGENT_ROLLUP_COLUMNS} FROM agent_rollups
         WHERE project = ?1 AND server = ?2 AND tool = ?3 AND bucket_seconds = ?4 AND bucket_ms = ?5 AND agent = ?6"
    ))?;
    let mut rows = Vec::new();
    for key in keys {
        let seconds = key.granularity_ms / 1000;
        let found = match &key.agent {
            None => tool
                .query_row(params![key.project, seconds, key.bucket_ms, key.server, key.tool], |row| {
                    let outcomes: [i64; 7] = [
                        row.get(11)?,
                        row.get(12)?,
                        row.get(13)?,
                        row.get(14)?,
                        row.get(15)?,
                        row.get(16)?,
                        row.get(17)?,
                    ];
                    let (latency, shapes): (Vec<u8>, Vec<u8>) = (row.get(18)?, row.get(19)?);
                    Ok((
                        StoredColumns { offset: 0 }.rollup(key, row)?,
                        outcomes,
                        Some((latency, shapes)),
                        None,
                    ))
                })
                .optional()?,
            Some(name) => agent
                .query_row(params![key.project, key.server, key.tool, seconds, key.bucket_ms, name], |row| {
                    let sessions: Vec<u8> = row.get(12)?;
                    Ok((StoredColumns { offset: 1 }.rollup(key, row)?, [0; 7], None, Some(sessions)))
                })
                .optional()?,
        };
        let Some((mut rollup, outcomes, tool_sketches, sessions)) = found else { continue };
        rollup.outcomes = outcomes.map(|n| n as u64);
        if let Some((latency, shapes)) = tool_sketches {
            rollup.latency = rollup::LatencySketch::decode(&latency)?;
            rollup.shapes = rollup::ShapeCounts::decode(&shapes)?;
        }
        if let Some(sessions) = sessions {
            rollup.sessions = rollup::SessionSketch::decode(&sessions)?;
        }
        rows.push(rollup);
    }
    Ok(rows)
}

/// The columns both rollup tables share, read from a row of `SELECT {…_ROLLUP_COLUMNS}` (agent rows have
/// one more key column before them).
struct StoredColumns {
    offset: usize,
}

impl StoredColumns {
    fn rollup(&self, key: &RollupKey, row: &rusqlite::Row<'_>) -> rusqlite::Result<Rollup> {
        let at = |i: usize| i + self.offset;
        Ok(Rollup {
            key: key.clone(),
            through: Some(InputPosition {
                partition: row.get(at(5))?,
                offset: row.get::<_, i64>(at(6))? as u64,
            }),
            calls: row.get::<_, i64>(at(7))? as u64,
            errors: row.get::<_, i64>(at(8))? as u64,
            duration_sum_ms: row.get(at(9))?,
            last_call_ms: row.get(at(10))?,
            ..Default::default()
        })
    }
}

/// The tool rows of a window (minute rows at its start, hour rows after), as a subquery: `?1` project,
/// `?2` the window's start, `?3` where hour rows begin.
const TOOL_WINDOW: &str = "(SELECT * FROM tool_rollups WHERE project = ?1 AND bucket_seconds = 3600 AND bucket_ms >= ?3
     UNION ALL
     SELECT * FROM tool_rollups WHERE project = ?1 AND bucket_seconds = 60 AND bucket_ms >= ?2 AND bucket_ms < ?3)";

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
         WHERE e.project = ?1 AND e.status = 'open' GROUP BY 1, 2
         UNION ALL
         SELECT e.server_name, o.key, SUM(o.value)
         FROM schema_drift_events e, json_each(e.event, '$.omitted_changes') o
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
            forget(&transaction, &batch)?;
            transaction.commit()?;
            Ok(())
        })
        .await
    }

    async fn rollups(&self, keys: &[RollupKey]) -> Result<Vec<Rollup>, StoreError> {
        let keys = keys.to_vec();
        Self::with(&self.writer, move |connection| read_rollups(connection, &keys)).await
    }

    async fn backfill_rollups(
        &self,
        tools: &[(ToolKey, InputPosition)],
        mut backfill: rollup::Backfill,
    ) -> Result<Vec<Rollup>, StoreError> {
        let tools = tools.to_vec();
        Self::with(&self.writer, move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT agent_name, session_id, started_at, ingested_at, duration_ms, status, shape_outcome, shape_hash
                 FROM tool_calls WHERE project = ?1 AND server = ?2 AND tool = ?3 AND ingested_at >= ?4",
            )?;
            for (key, through) in tools {
                let (project, server, tool) = (key.project.as_str(), key.server.as_str(), key.tool.as_str());
                let mut rows = select.query(params![project, server, tool, backfill.since_ms()])?;
                while let Some(row) = rows.next()? {
                    let (agent, session): (Option<String>, Option<String>) = (row.get(0)?, row.get(1)?);
                    let (status, outcome): (String, String) = (row.get(5)?, row.get(6)?);
                    let hash: Option<String> = row.get(7)?;
                    let call = rollup::CallFacts {
                        project,
                        server,
                        tool,
                        agent: agent.as_deref(),
                        session: session.as_deref(),
                        started_ms: row.get(2)?,
                        ingested_ms: row.get(3)?,
                        duration_ms: row.get(4)?,
                        error: status == "error",
                        outcome: crate::stored_outcome(&outcome),
                        shape_hash: hash.as_deref(),
                    };
                    backfill.add(&call, through);
                }
            }
            Ok(backfill.finish())
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

    /// Commits reach the write-ahead log unsynced (`synchronous = NORMAL`); syncing the log and the
    /// database file makes every one durable, whichever of the two holds it (SQLite reuses the log only
    /// after a checkpoint that synced the database).
    async fn sync(&self) -> Result<(), StoreError> {
        let database = self.path.to_path_buf();
        let mut log = database.clone().into_os_string();
        log.push("-wal");
        tokio::task::spawn_blocking(move || {
            for file in [std::path::PathBuf::from(log), database] {
                match std::fs::File::open(&file).and_then(|file| file.sync_all()) {
                    Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                        return Err(StoreError::Unavailable(format!(
                            "cannot sync {}: {err}",
                            file.display()
                        )));
                    }
                    _ => {}
                }
            }
            Ok(())
        })
        .await
        .map_err(|err| StoreError::Unavailable(format!("sync task failed: {err}")))?
    }

    async fn expire(&self, now: Timestamp) -> Result<u64, StoreError> {
        let now = now.as_millis();
        let mut expired = 0;
        // One run per transaction, the writer's lock let go between runs: a batch waits for one at most.
        loop {
            let removed = Self::with(&self.writer, move |connection| {
                let transaction = connection.transaction()?;
                let removed = expire_run(&transaction, now)?;
                transaction.commit()?;
                Ok(removed)
            })
            .await?;
            expired += removed;
            if removed == 0 {
                return Ok(expired);
            }
        }
    }

    fn repeat_lookup(&self) -> crate::RepeatLookup {
        crate::RepeatLookup::Store
    }

    async fn recent_identities(
        &self,
        streams: Streams<'_>,
        since: Timestamp,
        most_per_stream: usize,
    ) -> Result<Vec<(String, InputPosition, Timestamp)>, StoreError> {
        let only = match streams {
            Streams::All => None,
            Streams::Only(streams) => Some(streams.to_vec()),
        };
        Self::with(&self.lookup, move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT identity, partition, offset, ingested_at FROM call_identities WHERE ingested_at >= ?1",
            )?;
            let mut rows: Vec<(String, InputPosition, Timestamp)> = select
                .query_map(params![ms(since)], |row| {
                    let identity = match row.get_ref(0)? {
                        rusqlite::types::ValueRef::Blob(bytes) => hex::encode(bytes),
                        other => String::from_utf8_lossy(other.as_bytes().unwrap_or_default()).into_owned(),
                    };
                    let position = InputPosition { partition: row.get(1)?, offset: row.get::<_, i64>(2)? as u64 };
                    Ok((identity, position, row.get::<_, i64>(3)?))
                })?
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .filter(|(_, position, _)| only.as_ref().is_none_or(|only| only.contains(&position.partition)))
                .filter_map(|(identity, position, at)| Some((identity, position, Timestamp::from_millis(at)?)))
                .collect();
            rows.sort_by_key(|(_, position, at)| (position.partition, std::cmp::Reverse(*at)));
            let mut kept: HashMap<u32, usize> = HashMap::new();
            rows.retain(|(_, position, _)| {
                let count = kept.entry(position.partition).or_default();
                *count += 1;
                *count <= most_per_stream
            });
            Ok(rows)
        })
        .await
    }

    async fn stored_calls(
        &self,
        identities: &[String],
        since: Timestamp,
    ) -> Result<HashMap<String, InputPosition>, StoreError> {
        // In key order, so that consecutive lookups descend through the same pages.
        let mut identities: Vec<(rusqlite::types::Value, String)> =
            identities.iter().map(|identity| (identity_key(identity), identity.clone())).collect();
        identities.sort_unstable_by(|a, b| sort_bytes(&a.0).cmp(&sort_bytes(&b.0)));
        // One read transaction for all of them, not one per lookup.
        Self::with(&self.lookup, move |connection| {
            let transaction = connection.transaction()?;
            let mut stored = HashMap::new();
            {
                let mut select = transaction.prepare_cached(
                    "SELECT partition, offset FROM call_identities WHERE identity = ?1 AND ingested_at >= ?2",
                )?;
                for (key, identity) in identities {
                    let found = select
                        .query_row(params![key, ms(since)], |row| {
                            Ok(InputPosition { partition: row.get(0)?, offset: row.get::<_, i64>(1)? as u64 })
                        })
                        .optional()?;
                    if let Some(position) = found {
                        stored.insert(identity, position);
                    }
                }
            }
            transaction.commit()?;
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
        list_bytes: usize,
    ) -> Result<Vec<SchemaDriftEvent>, StoreError> {
        let (project, server) = (project.to_owned(), server.to_owned());
        self.read(move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT event, status, accepted_by, accepted_at FROM schema_drift_events
                 WHERE project = ?1 AND server_name = ?2 ORDER BY detected_at DESC, id DESC LIMIT ?3",
            )?;
            let mut rows = select.query(params![project, server, limit])?;
            // One row at a time, its text borrowed from SQLite: only the events answered with their lists
            // are held whole.
            let mut history = views::History::new(list_bytes);
            while let Some(row) = rows.next()? {
                let json = text_at(row, 0)?;
                history.push(json.len(), event_from_row(json, row)?);
            }
            Ok(history.into_events())
        })
        .await
    }

    async fn drift_event(
        &self,
        project: &str,
        server: &str,
        id: &str,
    ) -> Result<Option<SchemaDriftEvent>, StoreError> {
        let (project, server, id) = (project.to_owned(), server.to_owned(), id.to_owned());
        self.read(move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT event, status, accepted_by, accepted_at FROM schema_drift_events
                 WHERE project = ?1 AND server_name = ?2 AND id = ?3",
            )?;
            let mut rows = select.query(params![project, server, id])?;
            match rows.next()? {
                Some(row) => Ok(Some(event_from_row(text_at(row, 0)?, row)?)),
                None => Ok(None),
            }
        })
        .await
    }

    async fn drift_impact(&self, query: ImpactQuery<'_>) -> Result<DriftImpact, StoreError> {
        let (project, server, tool) =
            (query.project.to_owned(), query.server.to_owned(), query.tool.to_owned());
        let window = rollup::window(ms(query.now), query.hours);
        let (events, rows) = self
            .read(move |connection| {
                let mut select = connection.prepare_cached(
                    "SELECT json_extract(event, '$.changes') FROM schema_drift_events
                     WHERE project = ?1 AND server_name = ?2 AND status = 'open'",
                )?;
                let events: Vec<String> =
                    select.query_map(params![project, server], |row| row.get(0))?.collect::<Result<_, _>>()?;
                let mut select = connection.prepare_cached(
                    "SELECT agent, calls, errors, duration_sum, last_call_ms, sessions FROM agent_rollups
                     WHERE project = ?1 AND server = ?2 AND tool = ?3 AND bucket_seconds = 3600 AND bucket_ms >= ?5
                     UNION ALL
                     SELECT agent, calls, errors, duration_sum, last_call_ms, sessions FROM agent_rollups
                     WHERE project = ?1 AND server = ?2 AND tool = ?3 AND bucket_seconds = 60
                       AND bucket_ms >= ?4 AND bucket_ms < ?5",
                )?;
                let rows: Vec<rollup::AgentRow> = select
                    .query_map(
                        params![project, server, tool, window.from_ms, window.hours_from_ms],
                        |row| {
                            Ok(rollup::AgentRow {
                                agent: row.get(0)?,
                                calls: row.get::<_, i64>(1)? as u64,
                                errors: row.get::<_, i64>(2)? as u64,
                                duration_sum_ms: row.get(3)?,
                                last_call_ms: row.get(4)?,
                                sessions: row.get(5)?,
                            })
                        },
                    )?
                    .collect::<Result<_, _>>()?;
                Ok((events, rows))
            })
            .await?;
        let (agents, total_sessions) = rollup::agent_stats(rows)?;
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

    async fn server_surfaces(
        &self,
        project: &str,
        server: &str,
    ) -> Result<Option<ServerSurfaces>, StoreError> {
        let (project, server) = (project.to_owned(), server.to_owned());
        self.read(move |connection| {
            let surfaces: Option<Option<String>> = connection
                .prepare_cached(
                    // The server's current list (two captures may share a time), else the newest.
                    "SELECT s.surfaces FROM server_snapshots s LEFT JOIN servers v
                         ON v.project = s.project AND v.server_name = s.server_name
                     WHERE s.project = ?1 AND s.server_name = ?2
                     ORDER BY s.schema_hash IS v.schema_hash DESC, s.captured_at DESC LIMIT 1",
                )?
                .query_row(params![project, server], |row| row.get(0))
                .optional()?;
            Ok(surfaces.flatten().map(|json| serde_json::from_str(&json)).transpose()?)
        })
        .await
    }

    async fn tools(&self, project: &str, hours: u32, now: Timestamp) -> Result<Vec<ToolSummary>, StoreError> {
        let project = project.to_owned();
        let window = rollup::window(ms(now), hours);
        self.read(move |connection| {
            let mut select = connection
                .prepare_cached("SELECT server_name, tool_name FROM tool_schemas WHERE project = ?1")?;
            let declared: BTreeSet<(String, String)> = select
                .query_map(params![project], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<Result<_, _>>()?;
            let mut shapes = HashMap::new();
            let mut select = connection
                .prepare_cached("SELECT server, tool, shape FROM tool_shapes WHERE project = ?1")?;
            for row in select.query_map(params![project], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?, row.get::<_, String>(2)?))
            })? {
                let (server, tool, json) = row?;
                shapes.insert((server, tool), views::shape_status(&json)?);
            }
            let mut select = connection.prepare_cached(&format!(
                "SELECT server, tool, SUM(calls), SUM(errors), SUM(duration_sum), MAX(last_call_ms)
                 FROM {TOOL_WINDOW} GROUP BY server, tool ORDER BY server, tool"
            ))?;
            let calls: Vec<views::CallStats> = select
                .query_map(params![project, window.from_ms, window.hours_from_ms], |row| {
                    let calls = row.get::<_, i64>(2)? as u64;
                    let duration_sum: f64 = row.get(4)?;
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        calls,
                        row.get::<_, i64>(3)? as u64,
                        duration_sum / calls.max(1) as f64,
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
        let from = views::since(now, hours);
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

    async fn dead_letters(&self, project: &str) -> Result<Vec<DeadLetterCount>, StoreError> {
        // Keys `project/kind/stream`: a range of the primary key (no project name holds a `/`).
        let (from, to) = (format!("{project}/"), format!("{project}0"));
        self.read(move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT state FROM detector_state WHERE kind = ?1 AND key >= ?2 AND key < ?3",
            )?;
            let states = select
                .query_map(params![crate::DEAD_LETTER_STATE, from, to], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(crate::dead_letter_counts(states))
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
        let window = rollup::window(ms(now), hours);
        let rows = self
            .read(move |connection| {
                let mut select = connection.prepare_cached(&format!(
                    "SELECT server, tool, SUM(fingerprinted), SUM(oversized), SUM(truncated_sentinel),
                            SUM(unparseable), SUM(too_deep), SUM(absent), SUM(not_success)
                     FROM {TOOL_WINDOW} GROUP BY server, tool"
                ))?;
                let mut rows = Vec::new();
                let mut stored = select.query(params![project, window.from_ms, window.hours_from_ms])?;
                while let Some(row) = stored.next()? {
                    let (server, tool): (String, String) = (row.get(0)?, row.get(1)?);
                    let mut outcomes = [0u64; 7];
                    for (i, n) in outcomes.iter_mut().enumerate() {
                        *n = row.get::<_, i64>(i + 2)? as u64;
                    }
                    rows.extend(rollup::outcome_rows(&server, &tool, outcomes));
                }
                Ok(rows)
            })
            .await?;
        Ok(views::return_value_stats(hours, rows))
    }

    async fn call_buckets(&self, query: BucketQuery<'_>) -> Result<Vec<CallBucket>, StoreError> {
        let granularity = rollup::timeline_granularity(ms(query.from), query.bucket_ms).ok_or_else(|| {
            StoreError::Query(format!("buckets of {} ms are not whole minutes", query.bucket_ms))
        })?;
        let (project, server) = (query.project.to_owned(), query.server.to_owned());
        let tool = query.tool.map(str::to_owned);
        let (from, to, bucket) = (ms(query.from), ms(query.to), query.bucket_ms);
        let owned = BucketQuery { project: "", server: "", tool: None, ..query };
        let rows = self
            .read(move |connection| {
                let mut select = connection.prepare_cached(
                    "SELECT bucket_ms, calls, errors, latency, shapes FROM tool_rollups
                     WHERE project = ?1 AND server = ?2 AND (?3 IS NULL OR tool = ?3) AND bucket_seconds = ?4
                       AND bucket_ms >= ?5 AND bucket_ms < ?6",
                )?;
                let rows = select
                    .query_map(params![project, server, tool, granularity / 1000, from, to], |row| {
                        Ok(rollup::BucketRow {
                            bucket_ms: row.get(0)?,
                            calls: row.get::<_, i64>(1)? as u64,
                            errors: row.get::<_, i64>(2)? as u64,
                            latency: row.get(3)?,
                            shapes: row.get(4)?,
                        })
                    })?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await?;
        views::call_buckets(&owned, rollup::bucket_aggregates(from, bucket, rows)?)
    }

    async fn recent_calls(
        &self,
        project: &str,
        server: &str,
        tool: &str,
        since: Timestamp,
        limit: u32,
    ) -> Result<Vec<RecentCall>, StoreError> {
        let (project, server, tool) = (project.to_owned(), server.to_owned(), tool.to_owned());
        self.read(move |connection| {
            let mut select = connection.prepare_cached(
                "SELECT span_id, session_id, agent_name, started_at, ingested_at, duration_ms, status, error,
                        shape_outcome, shape_hash, compact_bytes
                 FROM tool_calls WHERE project = ?1 AND server = ?2 AND tool = ?3 AND ingested_at >= ?4
                 ORDER BY ingested_at DESC, started_at DESC, span_id DESC LIMIT ?5",
            )?;
            let mut rows = select.query(params![project, server, tool, ms(since), limit])?;
            let mut calls = Vec::new();
            while let Some(row) = rows.next()? {
                calls.push(RecentCall {
                    span_id: row.get(0)?,
                    session_id: row.get(1)?,
                    agent_name: row.get(2)?,
                    started_at: timestamp(row.get(3)?)?,
                    ingested_at: timestamp(row.get(4)?)?,
                    duration_ms: row.get(5)?,
                    status: row.get(6)?,
                    error: row.get(7)?,
                    shape_outcome: row.get(8)?,
                    shape_hash: row.get(9)?,
                    compact_bytes: row.get::<_, Option<i64>>(10)?.map(|b| b as u64),
                });
            }
            Ok(calls)
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

/// Removes at most a run ([`retention::RUN`]) of expired rows from each table that has any; answers how
/// many it removed (0: nothing has expired).
fn expire_run(connection: &Connection, now: i64) -> Result<u64, StoreError> {
    let calls = retention::cutoff_ms(now, retention::CALLS);
    let events = retention::cutoff_ms(now, retention::EVENTS);
    let notifications = retention::cutoff_ms(now, retention::NOTIFICATIONS);
    let mut removed = expire_calls(connection, calls)?;
    // Identities, by their index on time; the others are a few rows per drift, read whole.
    let by_age = [
        (
            "DELETE FROM call_identities WHERE identity IN
                 (SELECT identity FROM call_identities WHERE ingested_at < ?1 ORDER BY ingested_at LIMIT ?2)",
            calls,
        ),
        (
            "DELETE FROM notifications WHERE rowid IN
                 (SELECT rowid FROM notifications WHERE at < ?1 ORDER BY at LIMIT ?2)",
            notifications,
        ),
        (
            "DELETE FROM notifications_sent WHERE rowid IN
                 (SELECT rowid FROM notifications_sent WHERE sent_at < ?1 LIMIT ?2)",
            notifications,
        ),
    ];
    for (sql, before) in by_age {
        removed += connection.prepare_cached(sql)?.execute(params![before, retention::RUN])? as u64;
    }
    for sql in [
        "DELETE FROM schema_drift_events WHERE rowid IN
             (SELECT rowid FROM schema_drift_events WHERE detected_at < ?1 LIMIT ?2)",
        "DELETE FROM shape_drift_signals WHERE rowid IN
             (SELECT rowid FROM shape_drift_signals WHERE detected_at < ?1 LIMIT ?2)",
    ] {
        removed += connection.prepare_cached(sql)?.execute(params![events, retention::RUN])? as u64;
    }
    let minute = i64::try_from(retention::MINUTE_ROLLUPS.as_millis()).unwrap_or(i64::MAX);
    let hour = i64::try_from(retention::HOUR_ROLLUPS.as_millis()).unwrap_or(i64::MAX);
    let rollups = [
        ("tool_rollups", "project, bucket_seconds, bucket_ms, server, tool"),
        ("agent_rollups", "project, server, tool, bucket_seconds, bucket_ms, agent"),
    ];
    for (table, key) in rollups {
        removed += connection
            .prepare_cached(&format!(
                "DELETE FROM {table} WHERE ({key}) IN (SELECT {key} FROM {table}
                     WHERE bucket_ms < ?1 - CASE bucket_seconds WHEN 60 THEN ?2 ELSE ?3 END LIMIT ?4)"
            ))?
            .execute(params![now, minute, hour, retention::RUN])? as u64;
    }
    // All but each server's newest snapshots, however old (nothing reads them; a server whose list changes
    // at every probe would add one per probe).
    removed += connection
        .prepare_cached(
            "DELETE FROM server_snapshots WHERE rowid IN (
                 SELECT rowid FROM (
                     SELECT rowid, row_number() OVER (
                         PARTITION BY project, server_name ORDER BY captured_at DESC, rowid DESC) AS rank
                     FROM server_snapshots)
                 WHERE rank > ?1 LIMIT ?2)",
        )?
        .execute(params![retention::SNAPSHOTS_PER_SERVER, retention::RUN])? as u64;
    Ok(removed)
}

/// Removes up to a run of calls received before `before` from the front of each stream. A stream's calls
/// are stored in the order they were received, so the expired ones lead it; a call received out of that
/// order waits behind a newer one until that one expires too.
fn expire_calls(connection: &Connection, before: i64) -> Result<u64, StoreError> {
    let mut removed = 0;
    let mut stream: Option<i64> = connection
        .prepare_cached("SELECT MIN(partition) FROM tool_calls")?
        .query_row([], |row| row.get(0))?;
    while let Some(partition) = stream {
        let mut front = connection.prepare_cached(
            "SELECT offset, ingested_at FROM tool_calls WHERE partition = ?1 ORDER BY offset LIMIT ?2",
        )?;
        let mut rows = front.query(params![partition, retention::RUN])?;
        let (mut through, mut count) = (None, 0u64);
        while let Some(row) = rows.next()? {
            if row.get::<_, i64>(1)? >= before {
                break;
            }
            through = Some(row.get::<_, i64>(0)?);
            count += 1;
        }
        drop(rows);
        if let Some(through) = through {
            connection
                .prepare_cached("DELETE FROM tool_calls WHERE partition = ?1 AND offset <= ?2")?
                .execute(params![partition, through])?;
            removed += count;
        }
        stream = connection
            .prepare_cached("SELECT MIN(partition) FROM tool_calls WHERE partition > ?1")?
            .query_row(params![partition], |row| row.get(0))?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use driftline_bus::Positions;

    use super::*;

    /// A successful call of tool `p/s/t` without a value, started and received at `at`.
    fn call_at(span: &str, at: Timestamp) -> driftline_schemas::ToolCallRecord {
        driftline_schemas::ToolCallRecord {
            schema_version: driftline_schemas::SCHEMA_VERSION,
            project: driftline_schemas::ProjectName::parse("p".to_owned()).expect("project"),
            span_id: span.to_owned(),
            trace_id: None,
            session_id: None,
            agent_name: None,
            server: driftline_schemas::ServerName::parse("s".to_owned()).expect("server"),
            tool: driftline_schemas::ToolName::parse("t".to_owned()).expect("tool"),
            started_at: at,
            duration_ms: 5.0,
            status: driftline_schemas::CallStatus::Success,
            error: None,
            ingested_at: at,
            shape: None,
            shape_hash: None,
            compact_bytes: None,
            shape_outcome: driftline_schemas::ShapeOutcome::Absent,
        }
    }

    fn fresh_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("driftline-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }

    #[tokio::test]
    async fn an_upgraded_store_keeps_its_position_and_reapplies_nothing() {
        let dir = fresh_dir("upgrade");
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

    /// A store of schema version 8 (calls keyed by a hash id, identities as hex text) upgraded to calls keyed
    /// by position and packed identities: every stored call and identity is still found, and replays of new
    /// records are still stored once.
    #[tokio::test]
    async fn calls_and_identities_stored_before_append_keys_are_kept() {
        let dir = fresh_dir("append-keys");
        let path = dir.join("driftline.db");
        let now = Timestamp::from_millis(1_800_000_000_000).expect("time");
        {
            let old = Connection::open(&path).expect("open");
            old.execute_batch(
                "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
            )
            .expect("migrations table");
            for (index, sql) in MIGRATIONS[..8].iter().enumerate() {
                old.execute_batch(&format!(
                    "{sql}; INSERT INTO schema_migrations VALUES ({}, 0);",
                    index + 1
                ))
                .expect("old schema");
            }
            old.execute_batch(&format!(
                "INSERT INTO tool_calls (id, project, server, tool, span_id, started_at, ingested_at, duration_ms,
                     status, shape_outcome) VALUES ('call-old', 'p', 's', 't', 'old-span', {at}, {at}, 5, 'success',
                     'absent');
                 INSERT INTO call_identities (identity, partition, offset, ingested_at)
                     VALUES ('00112233445566778899aabbccddeeff', 0, 7, {at}), ('not-hex', 0, 8, {at});",
                at = now.as_millis()
            ))
            .expect("old rows");
        }
        let store = SqliteStore::open(&path).expect("upgrade");
        let since = Timestamp::from_millis(now.as_millis() - 1000).expect("since");
        let identities =
            ["00112233445566778899aabbccddeeff".to_owned(), "not-hex".to_owned(), "ff".repeat(16)];
        let stored = store.stored_calls(&identities, since).await.expect("lookup");
        assert_eq!(
            stored,
            HashMap::from([
                (identities[0].clone(), InputPosition { partition: 0, offset: 7 }),
                (identities[1].clone(), InputPosition { partition: 0, offset: 8 }),
            ])
        );
        let call = |span: &str| call_at(span, now);
        let batch = || Batch {
            calls: (9..11)
                .map(|offset| {
                    (
                        format!("call-{offset}"),
                        InputPosition { partition: 0, offset },
                        call(&format!("span-{offset}")),
                    )
                })
                .collect(),
            positions: Positions::from([(0, 10)]),
            ..Default::default()
        };
        store.apply(batch()).await.expect("apply");
        // A replay of the same records (their outputs stored again) adds nothing.
        store.apply(batch()).await.expect("replay");
        let calls = store.recent_calls("p", "s", "t", since, 100).await.expect("calls");
        let mut spans: Vec<&str> = calls.iter().map(|c| c.span_id.as_str()).collect();
        spans.sort_unstable();
        assert_eq!(spans, ["old-span", "span-10", "span-9"]);
    }

    #[tokio::test]
    async fn offsets_beyond_32_bits_round_trip() {
        let dir = fresh_dir("offsets");
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

    /// Rows past their retention go, the others stay: calls and identities after 30 days, notifications
    /// after 30, drift events and signals after 90, minute rollups after 72 hours and hour rollups after 31
    /// days; more rows than one run removes go in several.
    #[tokio::test]
    async fn rows_past_their_retention_are_expired() {
        let dir = fresh_dir("expiry");
        let path = dir.join("driftline.db");
        let store = SqliteStore::open(&path).expect("open");
        let day = 86_400_000;
        let t0 = Timestamp::from_millis(1_800_000_000_000).expect("time");
        let at = |days: i64| Timestamp::from_millis(t0.as_millis() + days * day).expect("time");
        // More old calls than one run removes, then a few ten days younger, on two streams.
        let old = retention::RUN as u64 + 7;
        let mut batch = Batch { positions: Positions::from([(0, old + 2), (1, 0)]), ..Default::default() };
        for offset in 0..old + 3 {
            let received = if offset < old { at(0) } else { at(10) };
            let position = InputPosition { partition: 0, offset };
            batch.calls.push((
                format!("call-{offset}"),
                position,
                call_at(&format!("span-{offset}"), received),
            ));
            batch.call_identities.push((format!("identity-{offset}"), position, received));
        }
        batch.calls.push((
            "call-other".to_owned(),
            InputPosition { partition: 1, offset: 0 },
            call_at("x", at(0)),
        ));
        store.apply(batch).await.expect("apply");
        let raw = Connection::open(&path).expect("raw");
        raw.execute_batch(&format!(
            "INSERT INTO schema_drift_events (id, project, server_name, detected_at, previous_hash, current_hash,
                 status, event) VALUES ('e', 'p', 's', {t0}, 'a', 'b', 'open', '{{}}');
             INSERT INTO shape_drift_signals (id, project, server, tool, detected_at, shape_hash, signal)
                 VALUES ('g', 'p', 's', 't', {t0}, 'h', '{{}}');
             INSERT INTO notifications (id, project, server_name, kind, at, body) VALUES ('n', 'p', 's', 'drift', {t0}, '{{}}');
             INSERT INTO notifications_sent (webhook, id, outcome, sent_at) VALUES ('w', 'n', 'sent', {t0});
             INSERT INTO tool_rollups VALUES ('p', 60, {t0}, 's', 't', 0, 0, 1, 0, 5, {t0}, 0, 0, 0, 0, 0, 0, 0, x'', x''),
                                             ('p', 3600, {t0}, 's', 't', 0, 0, 1, 0, 5, {t0}, 0, 0, 0, 0, 0, 0, 0, x'', x'');
             INSERT INTO agent_rollups VALUES ('p', 's', 't', 60, {t0}, 'a', 0, 0, 1, 0, 5, {t0}, x''),
                                              ('p', 's', 't', 3600, {t0}, 'a', 0, 0, 1, 0, 5, {t0}, x'');",
            t0 = t0.as_millis()
        ))
        .expect("rows");
        let count = |table: &str| -> i64 {
            raw.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| row.get(0)).expect(table)
        };
        let counts = || {
            [
                "tool_calls",
                "call_identities",
                "schema_drift_events",
                "shape_drift_signals",
                "notifications",
                "notifications_sent",
                "tool_rollups",
                "agent_rollups",
            ]
            .map(|table| (table, count(table)))
        };
        let expect = |when: &str, expected: [i64; 8]| {
            let actual = counts();
            assert_eq!(actual.map(|(_, n)| n), expected, "{when}: {actual:?}");
        };
        let all = old as i64 + 3;
        assert_eq!(store.expire(at(2)).await.expect("expire"), 0);
        expect("within every retention", [all + 1, all, 1, 1, 1, 1, 2, 2]);
        assert_eq!(store.expire(at(4)).await.expect("expire"), 2, "the minute rollups");
        expect("past 72 hours", [all + 1, all, 1, 1, 1, 1, 1, 1]);
        assert_eq!(store.expire(at(32)).await.expect("expire"), 2 * old + 1 + 2 + 2);
        expect("past 32 days", [3, 3, 1, 1, 0, 0, 0, 0]);
        let since = Timestamp::from_millis(0).expect("since");
        let calls = store.recent_calls("p", "s", "t", since, 100).await.expect("calls");
        assert_eq!(calls.len(), 3, "the younger calls are still read");
        let identities: Vec<String> = (0..old + 3).map(|offset| format!("identity-{offset}")).collect();
        assert_eq!(store.stored_calls(&identities, since).await.expect("lookup").len(), 3);
        assert_eq!(store.expire(at(41)).await.expect("expire"), 6);
        expect("past 41 days", [0, 0, 1, 1, 0, 0, 0, 0]);
        assert_eq!(store.expire(at(91)).await.expect("expire"), 2);
        expect("past 91 days", [0; 8]);
    }

    /// Each server keeps its newest snapshots, however old; a list seen again counts as new.
    #[tokio::test]
    async fn a_servers_newest_snapshots_are_kept() {
        let dir = fresh_dir("snapshots");
        let path = dir.join("driftline.db");
        let store = SqliteStore::open(&path).expect("open");
        let t0 = 1_800_000_000_000;
        let list = |server: &str, version: i64, at: i64| {
            let tools =
                driftline_schemas::ToolsText::parse(&format!(r#"[{{"name":"t{version}"}}]"#)).expect("tools");
            let at = Timestamp::from_millis(t0 + at).expect("time");
            crate::StoredToolList {
                project: "p".to_owned(),
                server: server.to_owned(),
                captured_at: at,
                hash: format!("hash-{version}"),
                tools: Arc::new(tools),
                surfaces: None,
            }
        };
        let kept = retention::SNAPSHOTS_PER_SERVER;
        let mut batch = Batch::default();
        // One more than a run, so the expiry takes two, and a list from the start seen again at the end.
        let versions = kept + retention::RUN + 5;
        batch.tool_lists = (0..versions).map(|v| list("busy", v, v)).collect();
        batch.tool_lists.push(list("busy", 0, versions));
        batch.tool_lists.extend((0..3).map(|v| list("quiet", v, v)));
        store.apply(batch).await.expect("apply");
        let raw = Connection::open(&path).expect("raw");
        let hashes = |server: &str| -> Vec<String> {
            let mut select = raw
                .prepare("SELECT schema_hash FROM server_snapshots WHERE server_name = ?1 ORDER BY captured_at DESC")
                .expect("select");
            select.query_map([server], |row| row.get(0)).expect("rows").map(|h| h.expect("hash")).collect()
        };
        assert_eq!(hashes("busy").len() as i64, versions);
        let far = Timestamp::from_millis(t0 + 10_000 * 86_400_000).expect("time");
        assert_eq!(store.expire(far).await.expect("expire"), (versions - kept) as u64);
        let mut expected = vec!["hash-0".to_owned()];
        expected.extend((versions - kept + 1..versions).rev().map(|v| format!("hash-{v}")));
        assert_eq!(hashes("busy"), expected, "the newest, the list seen again first");
        assert_eq!(hashes("quiet").len(), 3, "a server within the figure keeps every snapshot");
        assert_eq!(store.expire(far).await.expect("expire"), 0);
        let current = store.tool_schemas("p", "busy").await.expect("tools");
        assert_eq!(current.iter().map(|t| t.tool_name.as_str()).collect::<Vec<_>>(), ["t0"]);
    }
}
