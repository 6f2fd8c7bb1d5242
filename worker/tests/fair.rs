//! A batch stops at `max_batch_time` on the streams that carry tool lists and leaves the rest for the next
//! (calls are always taken): batches are stored, and lag moves, while a backlog of lists is read, and what
//! is left is read next, once, in order.

use std::sync::Arc;
use std::time::Duration;

use driftline_bus::{Message, Producer, SqliteBus, Topic};
use driftline_store::{QueryStore, SqliteStore};
use driftline_worker::{Worker, WorkerSettings};
use serde_json::json;

fn list(server: &str, tools: usize) -> Message {
    let tools: Vec<_> = (0..tools).map(|i| json!({"name": format!("t{i}")})).collect();
    let payload = json!({"project": "p", "server": server, "captured_at": "2026-01-01T00:00:00.000Z",
        "source": "probe", "tools": tools});
    Message { topic: Topic::ToolLists, key: format!("p/{server}"), payload: payload.to_string().into_bytes() }
}

fn call(tool: &str, span: &str) -> Message {
    let payload = json!({"project": "p", "span_id": span, "server": "srv", "tool": tool,
        "started_at": "2026-01-01T00:00:00Z", "duration_ms": 1, "status": "success", "ingested_at": "2026-01-01T00:00:00Z",
        "shape": "{v:number}", "shape_hash": "00000000", "compact_bytes": 8, "shape_outcome": "fingerprinted"});
    Message { topic: Topic::Spans, key: format!("p/srv/{tool}"), payload: payload.to_string().into_bytes() }
}

#[tokio::test]
async fn a_batch_out_of_time_leaves_the_rest_of_a_list_stream_for_the_next() {
    let dir = std::env::temp_dir().join(format!("driftline-worker-fair-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    // The embedded bus is one stream: lists and calls in one order.
    let bus = SqliteBus::open(&dir.join("bus.db"), || 0).expect("bus");
    let store = Arc::new(SqliteStore::open(&dir.join("store.db")).expect("store"));
    bus.publish(vec![list("a", 1), call("t", "1"), list("a", 2), list("b", 1), call("t", "2"), list("a", 3)])
        .await
        .expect("publish");
    let settings = WorkerSettings { max_batch_time: Duration::ZERO, ..WorkerSettings::default() };
    let mut worker = Worker::resume(bus.consumer(), store.clone(), settings).await.expect("worker");
    // No time at all: each batch takes one record of the list stream, and is stored.
    let mut batches = Vec::new();
    loop {
        let progress = worker.poll_once(100, Duration::ZERO).await.expect("a batch");
        if progress.records == 0 {
            break;
        }
        batches.push(progress.records);
    }
    assert_eq!(batches, [1, 1, 1, 1, 1, 1]);
    let servers = store.servers("p").await.expect("servers");
    let count = |name: &str| servers.iter().find(|s| s.server_name == name).map(|s| s.tool_count);
    assert_eq!((count("a"), count("b")), (Some(3), Some(1)), "every list read, in order");
    let shape = store.tool_shape("p", "srv", "t").await.expect("a read").expect("a shape");
    assert_eq!(shape.telemetry.fingerprinted, 2, "each call once");

    // A worker that restarts after a batch left records reads them again from the stored position.
    bus.publish(vec![list("c", 1), list("c", 2), call("t", "3")]).await.expect("publish");
    worker.poll_once(100, Duration::ZERO).await.expect("a batch");
    drop(worker);
    let mut again = Worker::resume(bus.consumer(), store.clone(), settings).await.expect("worker");
    while again.poll_once(100, Duration::ZERO).await.expect("a batch").records > 0 {}
    let servers = store.servers("p").await.expect("servers");
    assert_eq!(servers.iter().find(|s| s.server_name == "c").map(|s| s.tool_count), Some(2));
    let shape = store.tool_shape("p", "srv", "t").await.expect("a read").expect("a shape");
    assert_eq!(shape.telemetry.fingerprinted, 3, "each call once across the restart");
}
