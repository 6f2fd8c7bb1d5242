//! Tests of the SQLite store's own behaviour: upgrades, wide offsets, expiry, snapshots kept.

use std::collections::HashMap;

use driftline_bus::Positions;
use driftline_schemas::{InputPosition, Timestamp};

use super::*;
use crate::{retention, Batch, CallIdentity, DetectorStore, QueryStore, StoredCall, Streams};

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
        argument_shape: None,
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
            old.execute_batch(&format!("{sql}; INSERT INTO schema_migrations VALUES ({}, 0);", index + 1))
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
    let identities = ["00112233445566778899aabbccddeeff".to_owned(), "not-hex".to_owned(), "ff".repeat(16)];
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
            .map(|offset| StoredCall {
                id: format!("call-{offset}"),
                position: InputPosition { partition: 0, offset },
                call: call(&format!("span-{offset}")),
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
    let batch =
        Batch { positions: Positions::from([(3, far), (65_536, u64::from(u32::MAX))]), ..Default::default() };
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
        let call = call_at(&format!("span-{offset}"), received);
        batch.calls.push(StoredCall { id: format!("call-{offset}"), position, call });
        let identity = format!("identity-{offset}");
        batch.call_identities.push(CallIdentity { identity, position, received_at: received });
    }
    batch.calls.push(StoredCall {
        id: "call-other".to_owned(),
        position: InputPosition { partition: 1, offset: 0 },
        call: call_at("x", at(0)),
    });
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
         INSERT INTO agent_rollups VALUES ('p', 's', 't', 60, {t0}, 'a', 0, 0, 1, 0, 5, {t0}, x'', x''),
                                          ('p', 's', 't', 3600, {t0}, 'a', 0, 0, 1, 0, 5, {t0}, x'', x'');",
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
            .prepare(
                "SELECT schema_hash FROM server_snapshots WHERE server_name = ?1 ORDER BY captured_at DESC",
            )
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
