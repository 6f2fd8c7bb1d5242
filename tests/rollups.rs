//! Rollups count every call exactly once, on both stores. Random calls (several tools, agents and sessions,
//! started over the last 60 hours, some with a clock ahead, some sent twice) go through a real worker in
//! random batches; some batches are half written and refused (their outputs stored, their positions not:
//! what a ClickHouse detector killed between its inserts leaves) and the detector is restarted with empty
//! memory at random points (what kill -9 leaves). Then every read the API makes of traffic is compared
//! with the same read computed from the calls themselves, and the raw rows the store kept are counted.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use driftline_bus::{Message, Producer, SqliteBus, Topic};
use driftline_schemas::{InputPosition, Timestamp};
use driftline_store::rollup::{self, Rollup, RollupKey, MINUTE_MS};
use driftline_store::testing::{Hooked, Hooks};
use driftline_store::{
    Batch, BucketQuery, ClickHouseSettings, ClickHouseStore, DetectorStore, ImpactQuery, SqliteStore, Store,
    StoreError,
};
use driftline_worker::{Worker, WorkerSettings};
use proptest::prelude::*;
use serde_json::{json, Value};

const HOUR: i64 = 3_600_000;
const TOOLS: [&str; 3] = ["search", "fetch", "lookup"];
const SHAPES: [(&str, &str); 3] =
    [("{a:number}", "0000000a"), ("{b:string}", "0000000b"), ("[]", "0000000c")];

/// One generated call.
#[derive(Debug, Clone)]
struct Call {
    tool: usize,
    agent: Option<usize>,
    session: Option<usize>,
    /// Started this many ms before `now` (negative: the client's clock is ahead).
    age_ms: i64,
    /// Quarter milliseconds, so sums are exact in any order.
    quarter_ms: u32,
    error: bool,
    /// 0-2: a shape; 3: an oversized value (no shape).
    shape: usize,
    /// Sent again later under the same span id (a client's retry): counted once.
    retried: bool,
}

fn calls() -> impl Strategy<Value = Vec<Call>> {
    let age = prop_oneof![
        8 => 0i64..60 * HOUR,
        1 => -10 * MINUTE_MS..0,
        1 => (47 * HOUR - 5 * MINUTE_MS)..(48 * HOUR + 5 * MINUTE_MS),
    ];
    let call = (0..3usize, prop::option::of(0..3usize), prop::option::of(0..6usize), age, 0..4000u32)
        .prop_flat_map(|(tool, agent, session, age_ms, quarter_ms)| {
            (
                Just((tool, agent, session, age_ms, quarter_ms)),
                prop::bool::weighted(0.15),
                0..4usize,
                prop::bool::weighted(0.1),
            )
        })
        .prop_map(|((tool, agent, session, age_ms, quarter_ms), error, shape, retried)| Call {
            tool,
            agent,
            session,
            age_ms,
            quarter_ms,
            error,
            shape,
            retried,
        });
    prop::collection::vec(call, 1..90)
}

/// What happens around one poll of the worker.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Stored,
    /// Outputs stored, positions not, the batch refused.
    HalfWritten,
    /// The detector's memory is lost after the poll (kill -9 and restart).
    Restarted,
}

fn fates() -> impl Strategy<Value = Vec<(usize, Fate)>> {
    let fate = prop_oneof![6 => Just(Fate::Stored), 2 => Just(Fate::HalfWritten), 1 => Just(Fate::Restarted)];
    prop::collection::vec((1usize..25, fate), 1..12)
}

fn record(project: &str, i: usize, call: &Call, now: i64) -> Message {
    let at = |ms: i64| Timestamp::from_millis(ms).expect("a time");
    let (shape, hash, outcome) = match (call.error, call.shape) {
        (true, _) => (Value::Null, Value::Null, "not_success"),
        (false, 3) => (Value::Null, Value::Null, "oversized"),
        (false, s) => (json!(SHAPES[s].0), json!(SHAPES[s].1), "fingerprinted"),
    };
    let mut payload = json!({"project": project, "span_id": format!("span-{i}"), "server": "srv",
        "tool": TOOLS[call.tool], "started_at": at(now - call.age_ms), "duration_ms": f64::from(call.quarter_ms) / 4.0,
        "status": if call.error { "error" } else { "success" }, "ingested_at": at(now),
        "shape": shape, "shape_hash": hash, "compact_bytes": 10, "shape_outcome": outcome});
    if let Some(agent) = call.agent {
        payload["agent_name"] = json!(format!("agent-{agent}"));
    }
    if let Some(session) = call.session {
        payload["session_id"] = json!(format!("session-{session}"));
    }
    Message {
        topic: Topic::Spans,
        key: format!("{project}/srv/{}", TOOLS[call.tool]),
        payload: payload.to_string().into_bytes(),
    }
}

/// The store, half writing a batch when told to.
struct HalfWriting {
    next: AtomicBool,
}

#[async_trait]
impl Hooks<dyn Store> for HalfWriting {
    async fn apply(&self, store: &dyn Store, batch: Batch) -> Result<(), StoreError> {
        if self.next.swap(false, Ordering::SeqCst) {
            let outputs = Batch { positions: Default::default(), states: Vec::new(), ..batch };
            store.apply(outputs).await?;
            return Err(StoreError::Unavailable("killed between the outputs and the positions".into()));
        }
        store.apply(batch).await
    }
}

fn wall_clock() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Publishes the calls (retries after all of them) and runs them through workers that meet their fates.
async fn detect(
    project: &str,
    calls: &[Call],
    fates: &[(usize, Fate)],
    store: Arc<dyn Store>,
    dir: &std::path::Path,
    now: i64,
) {
    let bus = SqliteBus::open(&dir.join("bus.db"), wall_clock).expect("bus");
    let mut records: Vec<Message> =
        calls.iter().enumerate().map(|(i, c)| record(project, i, c, now)).collect();
    records
        .extend(calls.iter().enumerate().filter(|(_, c)| c.retried).map(|(i, c)| record(project, i, c, now)));
    bus.publish(records).await.expect("publish");
    let crashing = Arc::new(Hooked { inner: store, hooks: HalfWriting { next: AtomicBool::new(false) } });
    let start = || Worker::resume(bus.consumer(), crashing.clone(), WorkerSettings::default());
    let mut worker = start().await.expect("worker");
    let mut fates = fates.iter().cycle();
    let (mut idle, mut just_failed) = (0, false);
    for _ in 0..1_000 {
        let (size, fate) = *fates.next().expect("cycled");
        // A batch refused is then stored: the detector gets through eventually.
        let half_write = matches!(fate, Fate::HalfWritten) && !just_failed;
        just_failed = half_write;
        crashing.hooks.next.store(half_write, Ordering::SeqCst);
        match worker.poll_once(size, Duration::ZERO).await {
            Ok(progress) if progress.records == 0 => {
                idle += 1;
                if idle > 1 {
                    return;
                }
            }
            Ok(_) | Err(_) => idle = 0,
        }
        if matches!(fate, Fate::Restarted) {
            worker = start().await.expect("restarted worker");
        }
    }
    panic!("the worker did not catch up in 1,000 polls");
}

/// When a call counts, as `rollup::call_time` decides (the model's own copy of the rule).
fn counted_at(call: &Call, now: i64) -> i64 {
    now - call.age_ms.max(0)
}

fn nearest_rank(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// Every read of traffic, from the store.
async fn reads(store: &dyn Store, project: &str, now: i64) -> Value {
    let at = Timestamp::from_millis(now).expect("now");
    let mut out = json!({});
    for hours in [1u32, 6, 24, 47, 48, 49, 72] {
        // Tools with calls before the window are listed with none in it: the model lists tools with calls.
        let tools: Vec<Value> = store
            .tools(project, hours, at)
            .await
            .expect("tools")
            .into_iter()
            .filter(|t| t.calls > 0)
            .map(|t| {
                json!([t.tool, t.calls, t.errors, t.avg_latency_ms, t.last_called_at.map(|l| l.as_millis())])
            })
            .collect();
        let stats = store.return_value_stats(project, hours, at).await.expect("stats");
        let stats: Vec<Value> = stats
            .tools
            .iter()
            .map(|t| {
                json!([
                    t.tool,
                    t.counts.successful_calls,
                    t.counts.fingerprinted,
                    t.counts.oversized,
                    t.counts.not_success
                ])
            })
            .collect();
        let mut impact = json!({});
        for tool in TOOLS {
            let query = ImpactQuery {
                project,
                server: "srv",
                tool,
                hours,
                now: at,
                high_risk_sessions: 3,
                input_schema: None,
            };
            let found = store.drift_impact(query).await.expect("impact");
            let consumers: Vec<Value> = found
                .consumers
                .iter()
                .map(|c| {
                    json!([
                        c.agent_name,
                        c.session_count,
                        c.call_count,
                        c.error_count,
                        c.avg_latency_ms,
                        c.last_called_at.as_millis()
                    ])
                })
                .collect();
            impact[tool] = json!({"consumers": consumers, "sessions": found.total_sessions});
        }
        out[format!("{hours}h")] = json!({"tools": tools, "stats": stats, "impact": impact});
    }
    for (hours, bucket) in [(6i64, 5 * MINUTE_MS), (24, 30 * MINUTE_MS), (48, HOUR), (72, 6 * HOUR)] {
        let from = (now - hours * HOUR).div_euclid(bucket) * bucket;
        let to = (now.div_euclid(bucket) + 1) * bucket;
        for tool in [None, Some("search")] {
            let (from, to) =
                (Timestamp::from_millis(from).expect("from"), Timestamp::from_millis(to).expect("to"));
            let query = BucketQuery::new(project, "srv", tool, from, to, bucket).expect("valid buckets");
            let buckets: Vec<Value> = store
                .call_buckets(query)
                .await
                .expect("buckets")
                .into_iter()
                .filter(|b| b.calls > 0)
                .map(|b| {
                    json!([
                        b.start.as_millis(),
                        b.calls,
                        b.errors,
                        b.p50_ms,
                        b.p95_ms,
                        b.fingerprinted,
                        b.dominant_share
                    ])
                })
                .collect();
            out[format!("timeline {hours}h/{bucket} {}", tool.unwrap_or("*"))] = json!(buckets);
        }
    }
    out
}

/// The same reads, computed from the calls.
fn expected(calls: &[Call], now: i64) -> Value {
    let mut out = json!({});
    for hours in [1u32, 6, 24, 47, 48, 49, 72] {
        let from = rollup::window(now, hours).from_ms;
        let inside: Vec<&Call> = calls.iter().filter(|c| counted_at(c, now) >= from).collect();
        let mut tools = Vec::new();
        let mut stats = Vec::new();
        let mut impact = json!({});
        let mut by_name: Vec<(usize, &str)> = TOOLS.iter().copied().enumerate().collect();
        by_name.sort_by_key(|(_, name)| *name);
        for (t, tool) in by_name {
            let of_tool: Vec<&&Call> = inside.iter().filter(|c| c.tool == t).collect();
            if !of_tool.is_empty() {
                let sum: f64 = of_tool.iter().map(|c| f64::from(c.quarter_ms) / 4.0).sum();
                let errors = of_tool.iter().filter(|c| c.error).count();
                let last = of_tool.iter().map(|c| counted_at(c, now)).max();
                tools.push(json!([tool, of_tool.len(), errors, sum / of_tool.len() as f64, last]));
                let fingerprinted = of_tool.iter().filter(|c| !c.error && c.shape < 3).count();
                let oversized = of_tool.iter().filter(|c| !c.error && c.shape == 3).count();
                stats.push(json!([tool, of_tool.len() - errors, fingerprinted, oversized, errors]));
            }
            let mut agents: BTreeMap<String, Vec<&&Call>> = BTreeMap::new();
            for call in &of_tool {
                let name = call.agent.map_or("unknown".to_owned(), |a| format!("agent-{a}"));
                agents.entry(name).or_default().push(call);
            }
            let sessions =
                |calls: &[&&Call]| calls.iter().filter_map(|c| c.session).collect::<BTreeSet<_>>().len();
            let mut consumers: Vec<(String, Vec<&&Call>)> = agents.into_iter().collect();
            consumers.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
            let consumers: Vec<Value> = consumers
                .iter()
                .map(|(agent, calls)| {
                    let sum: f64 = calls.iter().map(|c| f64::from(c.quarter_ms) / 4.0).sum();
                    let last = calls.iter().map(|c| counted_at(c, now)).max();
                    json!([
                        agent,
                        sessions(calls),
                        calls.len(),
                        calls.iter().filter(|c| c.error).count(),
                        sum / calls.len() as f64,
                        last
                    ])
                })
                .collect();
            impact[tool] = json!({"consumers": consumers, "sessions": sessions(&of_tool)});
        }
        out[format!("{hours}h")] = json!({"tools": tools, "stats": stats, "impact": impact});
    }
    for (hours, bucket) in [(6i64, 5 * MINUTE_MS), (24, 30 * MINUTE_MS), (48, HOUR), (72, 6 * HOUR)] {
        let from = (now - hours * HOUR).div_euclid(bucket) * bucket;
        let to = (now.div_euclid(bucket) + 1) * bucket;
        for tool in [None, Some(0usize)] {
            let mut buckets: BTreeMap<i64, Vec<&Call>> = BTreeMap::new();
            for call in calls.iter().filter(|c| tool.is_none_or(|t| c.tool == t)) {
                let at = counted_at(call, now);
                if (from..to).contains(&at) {
                    buckets.entry(from + (at - from) / bucket * bucket).or_default().push(call);
                }
            }
            let rows: Vec<Value> = buckets
                .into_iter()
                .map(|(start, calls)| {
                    let mut durations: Vec<f64> =
                        calls.iter().map(|c| f64::from(c.quarter_ms) / 4.0).collect();
                    durations.sort_by(f64::total_cmp);
                    let shaped: Vec<usize> =
                        calls.iter().filter(|c| !c.error && c.shape < 3).map(|c| c.shape).collect();
                    let dominant =
                        (0..3).map(|s| shaped.iter().filter(|x| **x == s).count()).max().unwrap_or(0);
                    let share = (!shaped.is_empty()).then(|| dominant as f64 / shaped.len() as f64);
                    json!([
                        start,
                        calls.len(),
                        calls.iter().filter(|c| c.error).count(),
                        nearest_rank(&durations, 0.5),
                        nearest_rank(&durations, 0.95),
                        shaped.len(),
                        share
                    ])
                })
                .collect();
            let name = tool.map_or("*", |t| TOOLS[t]);
            out[format!("timeline {hours}h/{bucket} {name}")] = json!(rows);
        }
    }
    out
}

/// Percentiles of buckets holding more calls than a sketch keeps exactly are within its accuracy.
fn same(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Number(a), Value::Number(e)) => {
            let (a, e) = (a.as_f64().unwrap_or(f64::NAN), e.as_f64().unwrap_or(f64::NAN));
            a == e || (a - e).abs() <= e.abs() * rollup::LATENCY_ACCURACY
        }
        (Value::Array(a), Value::Array(e)) => a.len() == e.len() && a.iter().zip(e).all(|(a, e)| same(a, e)),
        (Value::Object(a), Value::Object(e)) => {
            a.len() == e.len() && a.iter().all(|(k, v)| e.get(k).is_some_and(|x| same(v, x)))
        }
        _ => actual == expected,
    }
}

/// Runs one case against `store`; returns what the store answers and what the calls say. (Retries are
/// records of their own, not calls: the model holds each call once.)
async fn case(
    store: Arc<dyn Store>,
    dir: &std::path::Path,
    calls: &[Call],
    fates: &[(usize, Fate)],
) -> (Value, Value) {
    let now = chrono::Utc::now().timestamp_millis();
    detect("p", calls, fates, store.clone(), dir, now).await;
    (reads(store.as_ref(), "p", now).await, expected(calls, now))
}

fn check(actual: &Value, expected: &Value) -> Result<(), TestCaseError> {
    if same(actual, expected) {
        return Ok(());
    }
    let (a, e) =
        (actual.as_object().cloned().unwrap_or_default(), expected.as_object().cloned().unwrap_or_default());
    let differing: Vec<String> = a
        .iter()
        .filter(|(k, v)| !e.get(*k).is_some_and(|x| same(v, x)))
        .map(|(k, v)| format!("{k}:\n  rollups {v}\n  calls   {}", e.get(k).cloned().unwrap_or_default()))
        .collect();
    Err(TestCaseError::fail(differing.join("\n")))
}

fn sqlite_raw_calls(path: &std::path::Path) -> u64 {
    let connection = rusqlite::Connection::open(path).expect("open");
    connection.query_row("SELECT COUNT(*) FROM tool_calls", [], |row| row.get::<_, i64>(0)).expect("count")
        as u64
}

fn clickhouse_raw_calls(database: &str) -> u64 {
    let url = format!("{}/?database={database}", support::clickhouse_url());
    let mut response = ureq::post(&url).send("SELECT count() FROM tool_calls FINAL").expect("count");
    response.body_mut().read_to_string().expect("body").trim().parse().expect("a number")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn sqlite_rollups_count_each_call_once(calls in calls(), fates in fates()) {
        let dir = support::temp_dir("rollups-sqlite");
        let path = dir.join("store.db");
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("store"));
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let (actual, expected) = runtime.block_on(case(store, &dir, &calls, &fates));
        check(&actual, &expected)?;
        prop_assert_eq!(sqlite_raw_calls(&path), calls.len() as u64, "raw rows");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn clickhouse_rollups_count_each_call_once(calls in calls(), fates in fates()) {
        let dir = support::temp_dir("rollups-clickhouse");
        static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let database = format!("rollups_{}_{}", std::process::id(), CASE.fetch_add(1, Ordering::SeqCst));
        let settings = ClickHouseSettings { url: support::clickhouse_url(), database: database.clone(), user: None, password: None };
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let (actual, expected) = runtime.block_on(async {
            driftline_store::migrate_clickhouse(&settings).await.expect("migrate");
            let store: Arc<dyn Store> = Arc::new(ClickHouseStore::connect(&settings).await.expect("connect"));
            case(store, &dir, &calls, &fates).await
        });
        check(&actual, &expected)?;
        prop_assert_eq!(clickhouse_raw_calls(&database), calls.len() as u64, "raw rows");
        let drop = format!("{}/", support::clickhouse_url());
        let _ = ureq::post(&drop).send(format!("DROP DATABASE IF EXISTS {database} SYNC").as_str());
    }
}

/// A driftline without rollups, as its store sees it: batches without rollup rows or rollup marks.
struct WithoutRollups;

#[async_trait]
impl Hooks<dyn Store> for WithoutRollups {
    async fn apply(&self, store: &dyn Store, batch: Batch) -> Result<(), StoreError> {
        let states = batch.states.into_iter().filter(|s| s.kind != "rollups").collect();
        store.apply(Batch { rollups: Vec::new(), states, ..batch }).await
    }
    async fn rollups(&self, _: &dyn Store, _: &[RollupKey]) -> Result<Vec<Rollup>, StoreError> {
        Ok(Vec::new())
    }
    async fn backfill_rollups(
        &self,
        _: &dyn Store,
        _: &[(driftline_schemas::ToolKey, InputPosition)],
        _: rollup::Backfill,
    ) -> Result<Vec<Rollup>, StoreError> {
        Ok(Vec::new())
    }
}

/// Calls read in turn by a driftline without rollups (before an upgrade), with them, without them again (an
/// old detector still running during a rolling upgrade) and with them: every call is in the rollups.
async fn upgrade(store: Arc<dyn Store>, dir: &std::path::Path) -> (Value, Value) {
    let now = chrono::Utc::now().timestamp_millis();
    let calls: Vec<Call> = (0..60)
        .map(|i| Call {
            tool: i % 3,
            agent: Some(i % 2),
            session: Some(i % 5),
            age_ms: (i as i64) * 53 * MINUTE_MS,
            quarter_ms: 40 + i as u32,
            error: i % 7 == 0,
            shape: i % 4,
            retried: false,
        })
        .collect();
    let bus = SqliteBus::open(&dir.join("bus.db"), wall_clock).expect("bus");
    let old: Arc<dyn DetectorStore> = Arc::new(Hooked { inner: store.clone(), hooks: WithoutRollups });
    for (range, detector) in [
        (0..20, old.clone()),
        (20..35, store.clone() as Arc<dyn DetectorStore>),
        (35..50, old),
        (50..60, store.clone()),
    ] {
        let records = range.clone().map(|i| record("p", i, &calls[i], now)).collect();
        bus.publish(records).await.expect("publish");
        let mut worker =
            Worker::resume(bus.consumer(), detector, WorkerSettings::default()).await.expect("worker");
        while worker.poll_once(15, Duration::ZERO).await.expect("a batch").records > 0 {}
    }
    (reads(store.as_ref(), "p", now).await, expected(&calls, now))
}

#[test]
fn sqlite_rollups_are_rebuilt_over_calls_read_without_them() {
    let dir = support::temp_dir("rollups-upgrade-sqlite");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.join("store.db")).expect("store"));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (actual, expected) = runtime.block_on(upgrade(store, &dir));
    check(&actual, &expected).expect("rollups equal the calls");
}

#[test]
fn clickhouse_rollups_are_rebuilt_over_calls_read_without_them() {
    let dir = support::temp_dir("rollups-upgrade-clickhouse");
    let database = format!("rollups_upgrade_{}", std::process::id());
    let settings = ClickHouseSettings {
        url: support::clickhouse_url(),
        database: database.clone(),
        user: None,
        password: None,
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (actual, expected) = runtime.block_on(async {
        driftline_store::migrate_clickhouse(&settings).await.expect("migrate");
        let store: Arc<dyn Store> = Arc::new(ClickHouseStore::connect(&settings).await.expect("connect"));
        upgrade(store, &dir).await
    });
    check(&actual, &expected).expect("rollups equal the calls");
    let url = format!("{}/", support::clickhouse_url());
    let _ = ureq::post(&url).send(format!("DROP DATABASE IF EXISTS {database} SYNC").as_str());
}
