//! A project holds detector state for at most `limits.max_tools_per_project` tools and
//! `limits.max_servers_per_project` servers, and its tools' state within `limits.max_state_bytes_per_project`:
//! a record that would add one more is a dead letter (counted per project and kind, for the dashboard and
//! `driftline health`), while the project's other keys, and other projects, go on — across restarts too. A
//! full project recovers: tools unseen too long are forgotten, and an admin can forget a tool or a server.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicI64, Ordering};

use driftline_bus::{Message, Producer, SqliteBus, Topic};
use driftline_store::{QueryStore, SqliteStore};
use driftline_worker::keys::KeyLimits;
use driftline_worker::{Worker, WorkerSettings};
use serde_json::json;

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("driftline-worker-keys-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

fn call(project: &str, tool: &str, span: &str) -> Message {
    let payload = json!({"project": project, "span_id": span, "server": "srv", "tool": tool,
        "started_at": "2026-01-01T00:00:00Z", "duration_ms": 1, "status": "success", "ingested_at": "2026-01-01T00:00:00Z",
        "shape": "{v:number}", "shape_hash": "00000000", "compact_bytes": 8, "shape_outcome": "fingerprinted"});
    Message {
        topic: Topic::Spans,
        key: format!("{project}/srv/{tool}"),
        payload: payload.to_string().into_bytes(),
    }
}

fn list(project: &str, server: &str, tools: usize) -> Message {
    let tools: Vec<_> = (0..tools).map(|i| json!({"name": format!("t{i}")})).collect();
    let payload = json!({"project": project, "server": server, "captured_at": "2026-01-01T00:00:00.000Z",
        "source": "probe", "tools": tools});
    Message {
        topic: Topic::ToolLists,
        key: format!("{project}/{server}"),
        payload: payload.to_string().into_bytes(),
    }
}

fn probe_failure(project: &str, server: &str) -> Message {
    let payload = json!({"project": project, "server": server, "probed_at": "2026-01-01T00:00:00.000Z",
        "error": "connection refused"});
    Message {
        topic: Topic::ToolLists,
        key: format!("{project}/{server}"),
        payload: payload.to_string().into_bytes(),
    }
}

fn settings(keys: KeyLimits) -> WorkerSettings {
    let mut settings = WorkerSettings { keys, ..WorkerSettings::default() };
    settings.tool_lists.max_tools = 10;
    settings
}

/// Reads everything published, and answers how many records became dead letters.
async fn drain(bus: &SqliteBus, store: &Arc<SqliteStore>, settings: WorkerSettings) -> u64 {
    let mut worker = Worker::resume(bus.consumer(), store.clone(), settings).await.expect("worker");
    for _ in 0..100 {
        if worker.poll_once(3, Duration::ZERO).await.expect("a batch").records == 0 {
            return worker.dead_letters;
        }
    }
    panic!("the worker did not reach the end of the bus in 100 batches");
}

async fn calls_of(store: &SqliteStore, project: &str, tool: &str) -> Option<u64> {
    let shape = store.tool_shape(project, "srv", tool).await.expect("a read")?;
    Some(shape.telemetry.fingerprinted)
}

#[tokio::test]
async fn a_project_adds_no_tools_beyond_its_limit() {
    let dir = dir("tools");
    let bus = SqliteBus::open(&dir.join("bus.db"), || 0).expect("bus");
    let store = Arc::new(SqliteStore::open(&dir.join("store.db")).expect("store"));
    let keys = KeyLimits { servers: 10, tools: 3, ..KeyLimits::default() };
    let mut records: Vec<Message> = (0..5).map(|t| call("p", &format!("t{t}"), &format!("a{t}"))).collect();
    // Tools held keep every call; another project has a budget of its own.
    records.push(call("p", "t0", "again"));
    records.push(call("q", "t9", "q1"));
    bus.publish(records).await.expect("publish");
    assert_eq!(drain(&bus, &store, settings(keys)).await, 2, "t3 and t4 of p are refused");
    assert_eq!(calls_of(&store, "p", "t0").await, Some(2));
    assert_eq!(calls_of(&store, "p", "t2").await, Some(1));
    assert_eq!(calls_of(&store, "p", "t3").await, None, "a tool beyond the limit has no state");
    assert_eq!(calls_of(&store, "q", "t9").await, Some(1));

    // A restarted worker counts what it restored: still no room for a new tool, a held one goes on.
    bus.publish(vec![call("p", "t7", "b7"), call("p", "t1", "b1")]).await.expect("publish");
    assert_eq!(drain(&bus, &store, settings(keys)).await, 1, "t7 of p is refused after a restart");
    assert_eq!(calls_of(&store, "p", "t1").await, Some(2));
    assert_eq!(calls_of(&store, "p", "t7").await, None);

    // A limit raised since makes room; one lowered since keeps every tool held.
    bus.publish(vec![call("p", "t7", "c7")]).await.expect("publish");
    assert_eq!(drain(&bus, &store, settings(KeyLimits { tools: 4, ..keys })).await, 0);
    bus.publish(vec![call("p", "t2", "d2"), call("p", "t8", "d8")]).await.expect("publish");
    assert_eq!(drain(&bus, &store, settings(KeyLimits { tools: 1, ..keys })).await, 1);
    assert_eq!(calls_of(&store, "p", "t2").await, Some(2));
    assert_eq!(calls_of(&store, "p", "t8").await, None);
}

#[tokio::test]
async fn a_project_adds_no_servers_beyond_its_limit() {
    let dir = dir("servers");
    let bus = SqliteBus::open(&dir.join("bus.db"), || 0).expect("bus");
    let store = Arc::new(SqliteStore::open(&dir.join("store.db")).expect("store"));
    let keys = KeyLimits { servers: 2, tools: 100, ..KeyLimits::default() };
    bus.publish(vec![
        // Refused by the list limits (11 tools): it takes no room.
        list("p", "too-long", 11),
        list("p", "a", 2),
        probe_failure("p", "b"),
        list("p", "c", 2),
        probe_failure("p", "d"),
        // Servers held go on.
        list("p", "a", 3),
        list("q", "c", 1),
    ])
    .await
    .expect("publish");
    assert_eq!(drain(&bus, &store, settings(keys)).await, 3, "the long list, then c and d of p");
    let servers = |project: &'static str| {
        let store = store.clone();
        async move {
            let mut names: Vec<(String, u32)> = store
                .servers(project)
                .await
                .expect("servers")
                .into_iter()
                .map(|s| (s.server_name, s.tool_count))
                .collect();
            names.sort();
            names
        }
    };
    assert_eq!(servers("p").await, [("a".to_owned(), 3), ("b".to_owned(), 0)]);
    assert_eq!(servers("q").await, [("c".to_owned(), 1)]);
}

/// A call of `tool` returning a value keyed by ids: every call a new shape of about `bytes`.
fn id_keyed_call(project: &str, tool: &str, span: &str, bytes: usize) -> Message {
    let keys: Vec<String> = (0..bytes / 24).map(|k| format!("u_{span}_{k:04}:number")).collect();
    let shape = format!("{{{}}}", keys.join(","));
    let payload = json!({"project": project, "span_id": span, "server": "srv", "tool": tool,
        "started_at": "2026-01-01T00:00:00Z", "duration_ms": 1, "status": "success", "ingested_at": "2026-01-01T00:00:00Z",
        "shape": shape, "shape_hash": "00000000", "compact_bytes": shape.len(), "shape_outcome": "fingerprinted"});
    Message {
        topic: Topic::Spans,
        key: format!("{project}/srv/{tool}"),
        payload: payload.to_string().into_bytes(),
    }
}

fn command(topic: Topic, command: serde_json::Value) -> Message {
    let key = match (&command["tool"], &command["server"]) {
        (serde_json::Value::String(tool), serde_json::Value::String(server)) => {
            format!("{}/{server}/{tool}", command["project"].as_str().expect("project"))
        }
        (_, serde_json::Value::String(server)) => {
            format!("{}/{server}", command["project"].as_str().expect("project"))
        }
        _ => command["project"].as_str().expect("project").to_owned(),
    };
    Message { topic, key, payload: command.to_string().into_bytes() }
}

/// Runs a worker to the end of the bus in batches of `batch`, and hands it back.
async fn drained<C: driftline_bus::Consumer>(mut worker: Worker<C>, batch: usize) -> Worker<C> {
    for _ in 0..10_000 {
        if worker.poll_once(batch, Duration::ZERO).await.expect("a batch").records == 0 {
            return worker;
        }
    }
    panic!("the worker did not reach the end of the bus in 10,000 batches");
}

async fn dead_letters(store: &SqliteStore, project: &str) -> Vec<(String, u64, String)> {
    let counts = store.dead_letters(project).await.expect("dead letters");
    counts.into_iter().map(|c| (c.kind, c.count, c.last_reason)).collect()
}

/// 100 tools of id-keyed 8 KB shapes (each call a new shape) under a budget that holds 40 tools at their
/// worst case: 40 are tracked, their state within the budget; the others' calls are dead letters counted
/// under `tool_limit` for the project, with the reason naming the budget.
#[tokio::test]
async fn id_keyed_shapes_stay_within_the_projects_byte_budget() {
    let dir = dir("budget");
    let bus = SqliteBus::open(&dir.join("bus.db"), || 0).expect("bus");
    let store = Arc::new(SqliteStore::open(&dir.join("store.db")).expect("store"));
    let per_tool = driftline_detectors::tool_state_worst_case_bytes(&Default::default());
    let budget = 40 * per_tool + per_tool / 2;
    let keys = KeyLimits { servers: 10, tools: 20_000, state_bytes: budget };
    for round in 0..30 {
        let calls = (0..100).map(|t| id_keyed_call("p", &format!("t{t:03}"), &format!("r{round}t{t}"), 8192));
        bus.publish(calls.collect()).await.expect("publish");
    }
    let worker = Worker::resume(bus.consumer(), store.clone(), settings(keys)).await.expect("worker");
    let worker = drained(worker, 500).await;
    let (bytes, tools) = worker.state_bytes("p");
    assert_eq!(tools, 40, "as many tools as the budget holds at their worst case");
    assert!(bytes <= budget, "{tools} tools hold {bytes} B, beyond the budget of {budget} B");
    println!(
        "40 tools of id-keyed 8 KB shapes hold {bytes} B (budget {budget} B, {per_tool} B a tool at worst)"
    );
    assert_eq!(worker.dead_letters, 60 * 30);
    let counts = dead_letters(&store, "p").await;
    assert_eq!(counts.len(), 1, "{counts:?}");
    let (kind, count, reason) = &counts[0];
    assert_eq!((kind.as_str(), *count), ("tool_limit", 60 * 30));
    assert!(reason.contains("limits.max_state_bytes_per_project"), "{reason}");
    assert_eq!(calls_of(&store, "p", "t000").await, Some(30));
    assert_eq!(calls_of(&store, "p", "t099").await, None);

    // An admin may not choose settings under which the tools held could outgrow the budget.
    let id = "thresholds-wide";
    bus.publish(vec![command(
        Topic::Commands,
        json!({"command": "set_thresholds", "id": id, "project": "p",
        "thresholds": {"history_window": 10000, "tool_return_value_max_bytes": 1048576}}),
    )])
    .await
    .expect("publish");
    drained(worker, 500).await;
    let result = store.command_result(id).await.expect("a read").expect("applied");
    let error = result["error"].as_str().unwrap_or_else(|| panic!("refused: {result}"));
    assert!(error.contains("limits.max_state_bytes_per_project") && error.contains("holds 40"), "{error}");
    assert_eq!(store.thresholds("p").await.expect("a read"), None, "the settings stay as they were");
}

static CLOCK: AtomicI64 = AtomicI64::new(1_767_225_600_000);

/// A project at its tool limit recovers: a tool unseen longer than `forget_unseen_tools_after` releases
/// its place (by the bus's clock), and an admin can forget a tool or a server at once.
#[tokio::test]
async fn a_full_project_recovers_after_expiry_or_an_admin_action() {
    let dir = dir("recover");
    let bus = SqliteBus::open(&dir.join("bus.db"), || CLOCK.load(Ordering::SeqCst)).expect("bus");
    let store = Arc::new(SqliteStore::open(&dir.join("store.db")).expect("store"));
    let keys = KeyLimits { servers: 1, tools: 2, ..KeyLimits::default() };
    let mut settings = settings(keys);
    settings.forget_unseen_tools_after = Duration::from_secs(3600);
    bus.publish(vec![call("p", "t0", "a0"), call("p", "t1", "a1"), call("p", "t2", "a2")])
        .await
        .expect("publish");
    let worker = Worker::resume(bus.consumer(), store.clone(), settings).await.expect("worker");
    let worker = drained(worker, 10).await;
    assert_eq!(worker.dead_letters, 1, "t2 is beyond the limit");
    assert_eq!(dead_letters(&store, "p").await[0].0, "tool_limit");

    // An admin forgets t1: its place goes to t2.
    bus.publish(vec![
        command(Topic::Spans, json!({"command": "forget_tool", "id": "forget-t1", "project": "p", "server": "srv", "tool": "t1", "by": "admin"})),
        call("p", "t2", "b2"),
    ])
    .await
    .expect("publish");
    let worker = drained(worker, 10).await;
    assert_eq!(worker.dead_letters, 1, "t2 now has room");
    let result = store.command_result("forget-t1").await.expect("a read").expect("applied");
    assert_eq!(result["forgotten"], json!(true), "{result}");
    assert_eq!(calls_of(&store, "p", "t1").await, None, "t1's state and view are gone");
    assert_eq!(calls_of(&store, "p", "t2").await, Some(1));

    // Two hours later, by the bus's clock, t0 and t2 have been unseen for longer than an hour: a new tool
    // finds room, and so does t0 again (starting afresh), while t3 keeps its place.
    CLOCK.fetch_add(2 * 3600 * 1000, Ordering::SeqCst);
    bus.publish(vec![call("p", "t3", "c3"), call("p", "t0", "c0"), call("p", "t4", "c4")])
        .await
        .expect("publish");
    drop(drained(worker, 10).await);
    // A restarted worker sees the same: t4 was refused, and what was forgotten stays forgotten.
    let worker = Worker::resume(bus.consumer(), store.clone(), settings).await.expect("worker");
    assert_eq!(worker.state_bytes("p").1, 2, "t3 and t0");
    assert_eq!(calls_of(&store, "p", "t0").await, Some(1), "t0 started afresh");
    assert_eq!(calls_of(&store, "p", "t2").await, None, "t2 expired");
    assert_eq!(calls_of(&store, "p", "t4").await, None);
    let counts = dead_letters(&store, "p").await;
    assert_eq!((counts[0].0.as_str(), counts[0].1), ("tool_limit", 2), "{counts:?}");

    // Servers: one fits; forgetting it makes room for another.
    bus.publish(vec![list("p", "a", 1), list("p", "b", 1)]).await.expect("publish");
    let worker = drained(worker, 10).await;
    let listed = |store: Arc<SqliteStore>| async move {
        let servers = store.servers("p").await.expect("servers").into_iter().map(|s| s.server_name);
        // `srv` is seen in calls only (no list, no detector state).
        servers.filter(|name| name != "srv").collect::<Vec<String>>()
    };
    assert_eq!(listed(store.clone()).await, ["a"]);
    bus.publish(vec![
        command(Topic::ToolLists, json!({"command": "forget_server", "id": "forget-a", "project": "p", "server": "a", "by": "admin"})),
        list("p", "b", 2),
    ])
    .await
    .expect("publish");
    drained(worker, 10).await;
    assert_eq!(listed(store.clone()).await, ["b"]);
    let counts = dead_letters(&store, "p").await;
    assert!(counts.iter().any(|(kind, count, _)| kind == "server_limit" && *count == 1), "{counts:?}");
}
