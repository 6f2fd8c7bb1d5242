//! Where the worker remembers recent calls ([`RepeatLookup::Remember`], the ClickHouse store's way; here
//! on SQLite, so that the worker alone is tested): a call sent again is counted once within a batch, across
//! batches and after a restart (the identities loaded from the store by stream and time), without asking
//! the store per batch; beyond the memory bound the oldest leave early, and are counted.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use driftline_bus::{Message, Producer, SqliteBus, Topic};
use driftline_schemas::{InputPosition, Timestamp};
use driftline_store::testing::{Hooked, Hooks};
use driftline_store::{QueryStore, RepeatLookup, SqliteStore, StoreError};
use driftline_worker::repeats::BYTES_PER_IDENTITY;
use driftline_worker::{Worker, WorkerSettings};
use serde_json::json;

struct Remembering;

#[async_trait]
impl Hooks<SqliteStore> for Remembering {
    async fn stored_calls(
        &self,
        _: &SqliteStore,
        _: &[String],
        _: Timestamp,
    ) -> Result<std::collections::HashMap<String, InputPosition>, StoreError> {
        Err(StoreError::Query("a worker that remembers recent calls must not look them up per batch".into()))
    }

    fn repeat_lookup(&self, _: &SqliteStore) -> RepeatLookup {
        RepeatLookup::Remember
    }
}

/// Now by the wall clock (the worker loads the identities of the last `repeat_window_hours` by it), each
/// reading 10 ms after the one before: every record has a time of its own, so "the newest" is one order.
fn clock() -> i64 {
    static START: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    static READINGS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    let start = *START.get_or_init(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
    });
    start + 10 * READINGS.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
}

fn call(span: &str) -> Message {
    let at = "2026-01-01T00:00:00Z";
    let payload = json!({"project": "p", "span_id": span, "server": "srv", "tool": "t", "started_at": at,
        "duration_ms": 1, "status": "success", "ingested_at": at, "shape": "{v:number}",
        "shape_hash": "00000000", "compact_bytes": 8, "shape_outcome": "fingerprinted"});
    Message { topic: Topic::Spans, key: "p/srv/t".into(), payload: payload.to_string().into_bytes() }
}

fn evicted() -> f64 {
    prometheus::gather()
        .iter()
        .filter(|family| family.name() == "driftline_worker_repeat_identities_evicted_total")
        .flat_map(|family| family.get_metric().iter().map(|m| m.get_counter().get_value()))
        .sum()
}

#[tokio::test]
async fn a_call_sent_again_is_counted_once_from_memory_across_batches_and_restarts() {
    let dir = std::env::temp_dir().join(format!("driftline-worker-repeats-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let bus = SqliteBus::open(&dir.join("bus.db"), clock).expect("bus");
    let store = Arc::new(Hooked {
        inner: Arc::new(SqliteStore::open(&dir.join("store.db")).expect("store")),
        hooks: Remembering,
    });
    let calls = || async {
        let shape = store.inner.tool_shape("p", "srv", "t").await.expect("a read").expect("a shape");
        shape.telemetry.fingerprinted
    };
    let drain = |mut worker: Worker<_>| async move {
        while worker.poll_once(3, Duration::ZERO).await.expect("a batch").records > 0 {}
        worker
    };
    let start = |settings: WorkerSettings| Worker::resume(bus.consumer(), store.clone(), settings);
    // One record at a time: each gets a time of its own.
    let publish = |spans: &'static [&'static str]| {
        let bus = bus.clone();
        async move {
            for span in spans {
                bus.publish(vec![call(span)]).await.expect("publish");
            }
        }
    };

    // Within a batch and across batches (three records a batch).
    publish(&["a", "b", "a", "a", "c"]).await;
    let worker = drain(start(WorkerSettings::default()).await.expect("worker")).await;
    assert_eq!(calls().await, 3, "a, b, c");
    drop(worker);

    // After a restart: loaded from the store.
    publish(&["b", "c", "d"]).await;
    let worker = drain(start(WorkerSettings::default()).await.expect("worker")).await;
    assert_eq!(calls().await, 4, "b and c were stored before the restart");
    drop(worker);

    // Memory for two identities: a restart loads the two newest (c and d); the oldest leave early, and a
    // repeat of one that left is counted again, and counted as such.
    let small = WorkerSettings { repeat_memory_bytes: 2 * BYTES_PER_IDENTITY, ..WorkerSettings::default() };
    let before = evicted();
    publish(&["d", "a", "e", "f", "e"]).await;
    drain(start(small).await.expect("worker")).await;
    assert_eq!(calls().await, 7, "d is a repeat; a (not held) counts again; e and f are new; e repeats");
    assert!(evicted() > before, "identities that left early are counted");
}
