//! Expiry on SQLite: rows past their retention removed in bounded runs, so batches written beside wait little.

use rusqlite::{params, Connection};

use crate::retention;
use crate::StoreError;

/// Removes at most a run ([`retention::RUN`]) of expired rows from each table that has any; answers how
/// many it removed (0: nothing has expired).
pub(super) fn expire_run(connection: &Connection, now: i64) -> Result<u64, StoreError> {
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
        "DELETE FROM upcoming_releases WHERE rowid IN
             (SELECT rowid FROM upcoming_releases WHERE detected_at < ?1 LIMIT ?2)",
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
pub(super) fn expire_calls(connection: &Connection, before: i64) -> Result<u64, StoreError> {
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
