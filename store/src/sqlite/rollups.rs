//! Rollup rows on SQLite: written whole per batch, read back by key.

use driftline_schemas::InputPosition;
use rusqlite::{params, Connection, OptionalExtension, Transaction};

use crate::rollup::{self, Rollup, RollupKey};
use crate::StoreError;

pub(super) const TOOL_ROLLUP_COLUMNS: &str =
    "project, server, tool, bucket_seconds, bucket_ms, through_partition,
    through_offset, calls, errors, duration_sum, last_call_ms, fingerprinted, oversized, truncated_sentinel,
    unparseable, too_deep, absent, not_success, latency, shapes";

pub(super) const AGENT_ROLLUP_COLUMNS: &str =
    "project, server, tool, bucket_seconds, bucket_ms, agent, through_partition,
    through_offset, calls, errors, duration_sum, last_call_ms, sessions, arguments";

/// Rollup rows replace what the store holds (they only grow: a row with fewer calls is never written
/// over one with more).
pub(super) fn write_rollups(transaction: &Transaction<'_>, rows: &[Rollup]) -> Result<(), StoreError> {
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
        "INSERT INTO agent_rollups ({AGENT_ROLLUP_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
         ON CONFLICT (project, server, tool, bucket_seconds, bucket_ms, agent) DO UPDATE SET
             through_partition = excluded.through_partition, through_offset = excluded.through_offset,
             calls = excluded.calls, errors = excluded.errors, duration_sum = excluded.duration_sum,
             last_call_ms = excluded.last_call_ms, sessions = excluded.sessions, arguments = excluded.arguments
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
                    row.arguments.encode(),
                ])?;
            }
        }
    }
    Ok(())
}

/// The stored rows of `keys` (point lookups by primary key).
pub(super) fn read_rollups(connection: &Connection, keys: &[RollupKey]) -> Result<Vec<Rollup>, StoreError> {
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
                    let sessions: (Vec<u8>, Vec<u8>) = (row.get(12)?, row.get(13)?);
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
        if let Some((sessions, arguments)) = sessions {
            rollup.sessions = rollup::SessionSketch::decode(&sessions)?;
            rollup.arguments = rollup::ArgumentShapes::decode(&arguments)?;
        }
        rows.push(rollup);
    }
    Ok(rows)
}

/// The columns both rollup tables share, read from a row of `SELECT {…_ROLLUP_COLUMNS}` (agent rows have
/// one more key column before them).
pub(super) struct StoredColumns {
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
