//! The embedded store: SQLite (bundled), WAL, versioned migrations from `schemas/sqlite/`. One writer
//! connection (the worker) and one reader connection (the API), so queries never wait on a write.

mod detector;
mod expire;
mod notifications;
mod query;
mod rollups;
#[cfg(test)]
mod tests;
mod write;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use driftline_schemas::SchemaDriftEvent;
use rusqlite::Connection;

use crate::views::{parse_name, timestamp};
use crate::StoreError;

/// Migrations in order; the version is the position (1-based).
const MIGRATIONS: &[&str] = &[
    include_str!("../../../schemas/sqlite/0001_init.sql"),
    include_str!("../../../schemas/sqlite/0002_probe_latency.sql"),
    include_str!("../../../schemas/sqlite/0003_positions_per_partition.sql"),
    include_str!("../../../schemas/sqlite/0004_state_stream.sql"),
    include_str!("../../../schemas/sqlite/0005_call_identities.sql"),
    include_str!("../../../schemas/sqlite/0006_notifications.sql"),
    include_str!("../../../schemas/sqlite/0007_calls_by_start.sql"),
    include_str!("../../../schemas/sqlite/0008_rollups.sql"),
    include_str!("../../../schemas/sqlite/0009_append_keys.sql"),
    include_str!("../../../schemas/sqlite/0010_expiry.sql"),
    include_str!("../../../schemas/sqlite/0011_surfaces.sql"),
    include_str!("../../../schemas/sqlite/0012_argument_shapes.sql"),
    include_str!("../../../schemas/sqlite/0013_context_cost.sql"),
    include_str!("../../../schemas/sqlite/0014_upcoming_releases.sql"),
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
