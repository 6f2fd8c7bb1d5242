//! The running worker reads and processes a batch while the one before is being written: a call sent again
//! in the next batch is a repeat before the store can tell, and batches are stored in input order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use driftline_bus::{Message, Producer, SqliteBus, Topic};
use driftline_schemas::{InputPosition, Timestamp};
use driftline_store::testing::{Hooked, Hooks};
use driftline_store::{Batch, DetectorStore, QueryStore, SqliteStore, StoreError, Streams};
use driftline_worker::{Worker, WorkerSettings};
use serde_json::json;

/// Holds back the first batch's write until the worker looks up the second batch's calls: the lookup then
/// runs while the first batch is in flight, before the store holds its calls.
struct HeldFirstWrite {
    lookups: AtomicUsize,
    applies: AtomicUsize,
    second_lookup: tokio::sync::Notify,
    /// Batch sizes in the order the store received them.
    stored: std::sync::Mutex<Vec<usize>>,
}

#[async_trait]
impl Hooks<SqliteStore> for HeldFirstWrite {
    async fn apply(&self, store: &SqliteStore, batch: Batch) -> Result<(), StoreError> {
        if self.applies.fetch_add(1, Ordering::SeqCst) == 0 {
            tokio::time::timeout(Duration::from_secs(10), self.second_lookup.notified())
                .await
                .map_err(|_| StoreError::Unavailable("the second batch was never looked up".into()))?;
        }
        let calls = batch.calls.len();
        store.apply(batch).await?;
        self.stored.lock().expect("lock").push(calls);
        Ok(())
    }

    async fn stored_calls(
        &self,
        store: &SqliteStore,
        identities: &[String],
        since: Timestamp,
    ) -> Result<std::collections::HashMap<String, InputPosition>, StoreError> {
        let found = store.stored_calls(identities, since).await;
        if self.lookups.fetch_add(1, Ordering::SeqCst) == 1 {
            self.second_lookup.notify_one();
        }
        found
    }
}

fn call(span: &str) -> Message {
    let at = "2026-01-01T00:00:00Z";
    let payload = json!({"project": "p", "span_id": span, "server": "srv", "tool": "t", "started_at": at,
        "duration_ms": 1, "status": "success", "ingested_at": at, "shape": "{v:number}",
        "shape_hash": "00000000", "compact_bytes": 8, "shape_outcome": "fingerprinted"});
    Message { topic: Topic::Spans, key: "p/srv/t".into(), payload: payload.to_string().into_bytes() }
}

#[tokio::test]
async fn a_retry_of_a_call_in_flight_counts_once() {
    let dir = std::env::temp_dir().join(format!("driftline-worker-{}-pipelined", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let bus = SqliteBus::open(&dir.join("bus.db"), || 1_767_225_600_000).expect("bus");
    // The first batch: a0..a4. The second: a client's retry of a2, and b0..b3.
    let first: Vec<Message> = (0..5).map(|i| call(&format!("a{i}"))).collect();
    let second: Vec<Message> = ["a2", "b0", "b1", "b2", "b3"].into_iter().map(call).collect();
    bus.publish(first).await.expect("publish");
    bus.publish(second).await.expect("publish");
    let store = Arc::new(Hooked {
        inner: Arc::new(SqliteStore::open(&dir.join("store.db")).expect("store")),
        hooks: HeldFirstWrite {
            lookups: AtomicUsize::new(0),
            applies: AtomicUsize::new(0),
            second_lookup: tokio::sync::Notify::new(),
            stored: std::sync::Mutex::new(Vec::new()),
        },
    });
    let mut worker =
        Worker::resume(bus.consumer(), store.clone(), WorkerSettings::default()).await.expect("worker");
    assert_eq!(worker.step(5, Duration::ZERO).await.expect("first").records, 5);
    assert_eq!(worker.step(5, Duration::ZERO).await.expect("second").records, 5);
    worker.flush().await.expect("stored");
    assert_eq!(
        *store.hooks.stored.lock().expect("lock"),
        [5, 4],
        "the retry is not stored; batches in order"
    );
    let shape = store.inner.tool_shape("p", "srv", "t").await.expect("shape").expect("a tool");
    assert_eq!(shape.telemetry.fingerprinted, 9, "nine distinct calls, the retry counted once");
    let resume = store.inner.resume(Streams::All).await.expect("resume");
    assert_eq!(resume.positions.get(&0), Some(&10), "both batches' positions stored");
    // Nothing is read again: the worker reads on after what it stored.
    assert_eq!(worker.step(5, Duration::ZERO).await.expect("idle").records, 0);
}
