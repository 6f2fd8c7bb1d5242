//! The store's behaviours by name, each run against both stores (SQLite and the real ClickHouse engine):
//! what the golden store contract (`store_contract.rs`) shows as one long file, said here one rule at a
//! time, so a store that breaks one names it.

mod support;

use std::future::Future;
use std::sync::Arc;

use driftline_bus::Positions;
use driftline_detectors::shape::record_from_span;
use driftline_schemas::{DetectorThresholds, InputPosition, ProjectName, Timestamp, ToolCallSpan, ToolKey};
use driftline_store::{
    AppliedCommand, Batch, CallIdentity, ClickHouseSettings, ClickHouseStore, DetectorState, Forgotten,
    ProjectSettings, SqliteStore, Store, StoredCall, Streams,
};
use serde_json::json;

/// Recent enough that no retention removes the rows: the start of the previous hour.
fn base() -> i64 {
    let now = chrono::Utc::now().timestamp_millis();
    now - now.rem_euclid(3_600_000) - 3_600_000
}

fn at(offset_ms: i64) -> Timestamp {
    Timestamp::from_millis(base() + offset_ms).expect("a valid time")
}

/// The `i`th call of `project`'s tool `srv/t`, read from the bus at `partition`/`i`.
fn call(project: &str, i: u64, partition: u32) -> (StoredCall, CallIdentity) {
    let span: ToolCallSpan = serde_json::from_value(json!({"span_id": format!("{project}-{i}"),
        "server": "srv", "tool": "t", "started_at": at(i as i64 * 1000), "duration_ms": 5,
        "status": "success", "agent_name": "planner", "return_value": {"n": i}}))
    .expect("a span");
    let project = ProjectName::parse(project).expect("a project");
    let record = record_from_span(&span, &project, at(i as i64 * 1000));
    let position = InputPosition { partition, offset: i };
    let identity = CallIdentity { identity: record.identity(), position, received_at: record.ingested_at };
    (StoredCall { id: format!("call-{}-{i}", project.as_str()), position, call: record }, identity)
}

fn calls(project: &str, count: u64, partition: u32) -> Batch {
    let (calls, call_identities) = (0..count).map(|i| call(project, i, partition)).unzip();
    Batch {
        calls,
        call_identities,
        positions: Positions::from([(partition, count - 1)]),
        ..Default::default()
    }
}

fn state(kind: &str, key: &str, stream: u32, text: &str) -> DetectorState {
    DetectorState { kind: kind.into(), key: key.into(), stream, state: text.into() }
}

async fn stored_calls_of(store: &dyn Store, project: &str) -> usize {
    store.recent_calls(project, "srv", "t", at(-1), 1_000).await.expect("recent calls").len()
}

async fn a_batch_applied_again_stores_each_call_once(store: Arc<dyn Store>) {
    store.apply(calls("a", 5, 0)).await.expect("apply");
    store.apply(calls("a", 5, 0)).await.expect("apply the replay");
    assert_eq!(stored_calls_of(store.as_ref(), "a").await, 5);
    assert_eq!(store.resume(Streams::All).await.expect("resume").positions.get(&0), Some(&4));
}

async fn no_read_of_one_project_returns_anothers_rows(store: Arc<dyn Store>) {
    let mut batch = calls("a", 3, 0);
    batch.settings.push(ProjectSettings { project: "a".into(), thresholds: DetectorThresholds::default() });
    store.apply(batch).await.expect("apply");
    assert_eq!(stored_calls_of(store.as_ref(), "a").await, 3);
    assert_eq!(stored_calls_of(store.as_ref(), "b").await, 0, "calls");
    assert!(store.thresholds("a").await.expect("thresholds").is_some());
    assert_eq!(store.thresholds("b").await.expect("thresholds"), None, "settings");
    assert!(store.servers("b").await.expect("servers").is_empty(), "servers");
    assert!(store.tools("b", 24, at(3_600_000)).await.expect("tools").is_empty(), "tools");
}

async fn a_newer_state_replaces_the_older_and_resumes_with_its_stream(store: Arc<dyn Store>) {
    let far = (1u64 << 32) + 7;
    let first = Batch {
        states: vec![state("tool", "a/srv/x", 3, "{\"v\":1}"), state("tool", "a/srv/y", 9, "{\"v\":2}")],
        positions: Positions::from([(3, far), (9, 1)]),
        ..Default::default()
    };
    store.apply(first).await.expect("apply");
    let later = Batch { states: vec![state("tool", "a/srv/x", 3, "{\"v\":3}")], ..Default::default() };
    store.apply(later).await.expect("apply the newer state");
    let only = store.resume(Streams::Only(&[3])).await.expect("resume stream 3");
    let states: Vec<_> = only.states.iter().map(|s| (s.key.as_str(), s.stream, s.state.as_str())).collect();
    assert_eq!(states, [("a/srv/x", 3, "{\"v\":3}")]);
    assert_eq!(only.positions, Positions::from([(3, far)]), "positions beyond 32 bits, of the stream asked");
    assert_eq!(store.resume(Streams::All).await.expect("resume").states.len(), 2);
}

async fn stored_calls_are_found_by_identity_received_since(store: Arc<dyn Store>) {
    let (stored, identity) = call("a", 0, 2);
    let batch = Batch { calls: vec![stored], call_identities: vec![identity.clone()], ..Default::default() };
    store.apply(batch).await.expect("apply");
    let asked = [identity.identity.clone(), "0".repeat(32)];
    let found = store.stored_calls(&asked, at(-1)).await.expect("stored calls");
    assert_eq!(found.into_iter().collect::<Vec<_>>(), [(identity.identity.clone(), identity.position)]);
    assert!(
        store.stored_calls(&asked, at(1)).await.expect("stored calls").is_empty(),
        "received before since"
    );
}

async fn forgetting_a_tool_drops_its_state_and_keeps_its_calls(store: Arc<dyn Store>) {
    let mut batch = calls("a", 2, 0);
    batch.states = vec![state("tool", "a/srv/t", 0, "{}"), state("server", "a/srv", 0, "{}")];
    store.apply(batch).await.expect("apply");
    let key = ToolKey::parse("a/srv/t").expect("a tool key");
    store.apply(Batch { forgotten: vec![Forgotten::Tool(key)], ..Default::default() }).await.expect("forget");
    let keys: Vec<_> =
        store.resume(Streams::All).await.expect("resume").states.into_iter().map(|s| s.key).collect();
    assert_eq!(keys, ["a/srv"], "the server's state stays");
    assert_eq!(stored_calls_of(store.as_ref(), "a").await, 2, "history stays");
}

async fn a_command_result_is_kept_by_its_id(store: Arc<dyn Store>) {
    let applied = AppliedCommand { id: "cmd-1".into(), at: at(0), result: json!({"accepted": true}) };
    store.apply(Batch { applied_commands: vec![applied], ..Default::default() }).await.expect("apply");
    assert_eq!(store.command_result("cmd-1").await.expect("result"), Some(json!({"accepted": true})));
    assert_eq!(store.command_result("cmd-2").await.expect("result"), None);
}

async fn expiry_run_again_removes_nothing_more(store: Arc<dyn Store>) {
    store.apply(calls("a", 3, 0)).await.expect("apply");
    store.expire(at(3_600_000)).await.expect("expire");
    assert_eq!(store.expire(at(3_600_000)).await.expect("expire again"), 0);
    assert_eq!(stored_calls_of(store.as_ref(), "a").await, 3, "recent calls stay");
}

fn run_on_sqlite<F, Fut>(name: &str, behaviour: F)
where
    F: FnOnce(Arc<dyn Store>) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = support::temp_dir(&format!("behaviour-{name}"));
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&dir.join("store.db")).expect("open the store"));
    tokio::runtime::Runtime::new().expect("runtime").block_on(behaviour(store));
}

fn run_on_clickhouse<F, Fut>(name: &str, behaviour: F)
where
    F: FnOnce(Arc<dyn Store>) -> Fut,
    Fut: Future<Output = ()>,
{
    let url = support::clickhouse_url();
    let settings = ClickHouseSettings {
        url: url.clone(),
        database: format!("behaviour_{name}_{}", std::process::id()),
        user: None,
        password: None,
    };
    tokio::runtime::Runtime::new().expect("runtime").block_on(async {
        driftline_store::migrate_clickhouse(&settings).await.expect("migrate");
        let store: Arc<dyn Store> = Arc::new(ClickHouseStore::connect(&settings).await.expect("connect"));
        behaviour(store).await;
    });
    let drop = format!("DROP DATABASE IF EXISTS {} SYNC", settings.database);
    let _ = ureq::post(&format!("{url}/")).send(drop.as_str());
}

/// Each behaviour as a test on each store: `sqlite::name` and `clickhouse::name`.
macro_rules! on_both_stores {
    ($($behaviour:ident),* $(,)?) => {
        mod sqlite {
            $(#[test]
            fn $behaviour() {
                super::run_on_sqlite(stringify!($behaviour), super::$behaviour);
            })*
        }
        mod clickhouse {
            $(#[test]
            fn $behaviour() {
                super::run_on_clickhouse(stringify!($behaviour), super::$behaviour);
            })*
        }
    };
}

on_both_stores!(
    a_batch_applied_again_stores_each_call_once,
    no_read_of_one_project_returns_anothers_rows,
    a_newer_state_replaces_the_older_and_resumes_with_its_stream,
    stored_calls_are_found_by_identity_received_since,
    forgetting_a_tool_drops_its_state_and_keeps_its_calls,
    a_command_result_is_kept_by_its_id,
    expiry_run_again_removes_nothing_more,
);
