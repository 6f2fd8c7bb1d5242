//! How long stored rows are kept. ClickHouse's tables carry these as TTLs in their DDL
//! (`schemas/clickhouse/`); the SQLite store removes expired rows itself ([`crate::DetectorStore::expire`]).
//! A test holds the DDL to these figures.

use std::time::Duration;

const HOUR: u64 = 3600;
const DAY: u64 = 24 * HOUR;

/// Calls (`tool_calls`, by when they were received) and their identities (`call_identities`): the longest
/// repeat window (`detector.repeat_window_hours` ≤ 720) fits.
pub const CALLS: Duration = Duration::from_secs(30 * DAY);
/// Drift events (`schema_drift_events`) and shape signals (`shape_drift_signals`), by when they were
/// detected.
pub const EVENTS: Duration = Duration::from_secs(90 * DAY);
/// Notifications (by when they were made) and their deliveries (by when they were sent).
pub const NOTIFICATIONS: Duration = Duration::from_secs(30 * DAY);
/// Rollup rows of one-minute buckets, from the start of their bucket.
pub const MINUTE_ROLLUPS: Duration = Duration::from_secs(72 * HOUR);
/// Rollup rows of hour buckets, from the start of their bucket.
pub const HOUR_ROLLUPS: Duration = Duration::from_secs(744 * HOUR);

/// Snapshots kept per server (`server_snapshots`, and on ClickHouse their `tool_schemas` rows): the newest
/// by capture time, however old. A server whose list changes at every probe (a counter or a time in a
/// description) would otherwise add a whole list per probe for as long as it runs; nothing reads more
/// than the newest (its current tools), drift events keep their own copies of the lists they compare.
pub const SNAPSHOTS_PER_SERVER: i64 = 20;

/// Rows removed per table and transaction: the detector's next batch waits for about one such run (a run
/// of 5,000 kept one-call batches waiting 69 ms at the median while expiring 5 M rows; 1,000: 15 ms, the
/// expiry itself ≈ 20 % slower).
pub(crate) const RUN: i64 = 1_000;

/// Unix milliseconds `retention` before `now` (rows older than this have expired).
pub(crate) fn cutoff_ms(now_ms: i64, retention: Duration) -> i64 {
    now_ms.saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each ClickHouse table's TTL in its DDL, as `(table, interval)` in the DDL's words, against the
    /// figures the SQLite store expires by.
    #[test]
    fn clickhouse_ttls_are_these_figures() {
        let ddl = [
            include_str!("../../schemas/clickhouse/0001_init.sql"),
            include_str!("../../schemas/clickhouse/0002_call_identities.sql"),
            include_str!("../../schemas/clickhouse/0003_notifications.sql"),
            include_str!("../../schemas/clickhouse/0004_rollups.sql"),
        ]
        .join("\n");
        let days = |retention: Duration| format!("INTERVAL {} DAY", retention.as_secs() / DAY);
        let expected = [
            ("schema_drift_events", format!("TTL toDateTime(detected_at) + {}", days(EVENTS))),
            ("tool_calls", format!("TTL toDateTime(ingested_at) + {}", days(CALLS))),
            ("shape_drift_signals", format!("TTL toDateTime(detected_at) + {}", days(EVENTS))),
            ("call_identities", format!("TTL toDateTime(ingested_at) + {}", days(CALLS))),
            ("notifications", format!("TTL toDateTime(at) + {}", days(NOTIFICATIONS))),
            ("notifications_sent", format!("TTL toDateTime(sent_at) + {}", days(NOTIFICATIONS))),
        ];
        for (table, ttl) in expected {
            let start = ddl.find(&format!("CREATE TABLE IF NOT EXISTS {table} (")).expect(table);
            let definition = &ddl[start..start + ddl[start..].find(';').expect("a statement")];
            assert!(definition.contains(&ttl), "{table}: expected `{ttl}` in\n{definition}");
        }
        let rollups = format!(
            "toIntervalHour(if(bucket_seconds = 60, {}, {}))",
            MINUTE_ROLLUPS.as_secs() / HOUR,
            HOUR_ROLLUPS.as_secs() / HOUR
        );
        assert_eq!(ddl.matches(&rollups).count(), 2, "both rollup tables expire by {rollups}");
    }
}
