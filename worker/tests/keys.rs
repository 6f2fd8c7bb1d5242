//! A project holds detector state for at most `limits.max_tools_per_project` tools and
//! `limits.max_servers_per_project` servers: a record that would add one more is a dead letter, while the
//! project's other keys, and other projects, go on — across restarts too.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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
    let keys = KeyLimits { servers: 10, tools: 3 };
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
    let keys = KeyLimits { servers: 2, tools: 100 };
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
