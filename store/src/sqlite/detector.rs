//! The worker's side of the SQLite store: batches, resume, rollups, repeats, expiry and sync.

use std::collections::HashMap;

use async_trait::async_trait;
use driftline_schemas::{InputPosition, Timestamp, ToolKey};
use rusqlite::{params, OptionalExtension};

use super::expire::expire_run;
use super::rollups::read_rollups;
use super::write::{forget, write_batch};
use super::{identity_key, sort_bytes, SqliteStore, WORKER};
use crate::rollup::{self, Rollup, RollupKey};
use crate::views::ms;
use crate::{Batch, DetectorState, DetectorStore, Resume, StoreError, Streams};

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
                        argument_shape: None,
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
