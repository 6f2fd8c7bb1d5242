//! A batch the store refuses is processed again from stored state: nothing counts twice, nothing is lost.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use driftline_bus::{Message, Producer, SqliteBus, Topic};
use driftline_schemas::api::{
    DriftImpact, ReturnValueStats, ServerHealth, SignalGroup, ToolSchema, ToolShape, ToolSummary,
};
use driftline_schemas::{DetectorThresholds, SchemaDriftEvent, Timestamp};
use driftline_store::{Batch, ImpactQuery, Resume, SqliteStore, Store, StoreError, Streams};
use driftline_worker::{Worker, WorkerSettings};
use serde_json::{json, Value};

/// The SQLite store, refusing the `fail_on`-th batch once.
struct Flaky {
    inner: SqliteStore,
    applies: AtomicUsize,
    fail_on: usize,
}

#[async_trait]
impl Store for Flaky {
    async fn apply(&self, batch: Batch) -> Result<(), StoreError> {
        if self.applies.fetch_add(1, Ordering::SeqCst) + 1 == self.fail_on {
            return Err(StoreError::Unavailable("injected failure".into()));
        }
        self.inner.apply(batch).await
    }
    async fn resume(&self, streams: Streams<'_>) -> Result<Resume, StoreError> {
        self.inner.resume(streams).await
    }
    async fn servers(&self, project: &str) -> Result<Vec<ServerHealth>, StoreError> {
        self.inner.servers(project).await
    }
    async fn drift_history(&self, p: &str, s: &str, limit: u32) -> Result<Vec<SchemaDriftEvent>, StoreError> {
        self.inner.drift_history(p, s, limit).await
    }
    async fn drift_impact(&self, query: ImpactQuery<'_>) -> Result<DriftImpact, StoreError> {
        self.inner.drift_impact(query).await
    }
    async fn tool_schemas(&self, p: &str, s: &str) -> Result<Vec<ToolSchema>, StoreError> {
        self.inner.tool_schemas(p, s).await
    }
    async fn tools(&self, p: &str, hours: u32, now: Timestamp) -> Result<Vec<ToolSummary>, StoreError> {
        self.inner.tools(p, hours, now).await
    }
    async fn tool_shape(&self, p: &str, s: &str, t: &str) -> Result<Option<ToolShape>, StoreError> {
        self.inner.tool_shape(p, s, t).await
    }
    async fn shape_drift(&self, p: &str, hours: u32, now: Timestamp) -> Result<Vec<SignalGroup>, StoreError> {
        self.inner.shape_drift(p, hours, now).await
    }
    async fn thresholds(&self, p: &str) -> Result<Option<DetectorThresholds>, StoreError> {
        self.inner.thresholds(p).await
    }
    async fn return_value_stats(
        &self,
        p: &str,
        hours: u32,
        now: Timestamp,
    ) -> Result<ReturnValueStats, StoreError> {
        self.inner.return_value_stats(p, hours, now).await
    }
    async fn command_result(&self, id: &str) -> Result<Option<Value>, StoreError> {
        self.inner.command_result(id).await
    }
    async fn stored_calls(
        &self,
        identities: &[String],
        since: driftline_schemas::Timestamp,
    ) -> Result<std::collections::HashMap<String, driftline_schemas::InputPosition>, StoreError> {
        self.inner.stored_calls(identities, since).await
    }
    async fn pending_notifications(
        &self,
        webhook: &str,
        since: driftline_schemas::Timestamp,
        limit: usize,
    ) -> Result<Vec<driftline_schemas::Notification>, StoreError> {
        self.inner.pending_notifications(webhook, since, limit).await
    }
    async fn record_notified(
        &self,
        webhook: &str,
        id: &str,
        outcome: &str,
        at: driftline_schemas::Timestamp,
    ) -> Result<(), StoreError> {
        self.inner.record_notified(webhook, id, outcome, at).await
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }
}

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("driftline-worker-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

fn record(i: usize) -> Message {
    let shape = if i >= 20 { "{v:string}" } else { "{v:number}" };
    let payload = json!({"project": "p", "span_id": format!("s{i}"), "server": "srv", "tool": "t",
        "started_at": "2026-01-01T00:00:00Z", "duration_ms": 1, "status": "success", "ingested_at": "2026-01-01T00:00:00Z",
        "shape": shape, "shape_hash": "00000000", "compact_bytes": 8, "shape_outcome": "fingerprinted"});
    Message { topic: Topic::Spans, key: "p/srv/t".into(), payload: payload.to_string().into_bytes() }
}

/// Runs 30 calls through a worker in batches of 7 and returns what the store then shows.
async fn run(name: &str, fail_on: usize) -> (Value, usize) {
    let dir = dir(name);
    let bus = SqliteBus::open(&dir.join("bus.db"), || 0).expect("bus");
    bus.publish((0..30).map(record).collect()).await.expect("publish");
    let store = Arc::new(Flaky {
        inner: SqliteStore::open(&dir.join("store.db")).expect("store"),
        applies: AtomicUsize::new(0),
        fail_on,
    });
    let mut worker =
        Worker::resume(bus.consumer(), store.clone(), WorkerSettings::default()).await.expect("worker");
    let mut failures = 0;
    for _ in 0..20 {
        match worker.poll_once(7, Duration::ZERO).await {
            Ok(progress) if progress.records == 0 => break,
            Ok(_) => {}
            Err(_) => failures += 1,
        }
    }
    let shape = store.tool_shape("p", "srv", "t").await.expect("shape").expect("a tool");
    let view = json!({"telemetry": shape.telemetry, "window": shape.window_size, "status": shape.status,
        "groups": shape.signal_groups.iter().map(|g| (g.occurrences, g.sample_span_id.clone())).collect::<Vec<_>>()});
    (view, failures)
}

#[tokio::test]
async fn a_refused_batch_is_redone_from_stored_state() {
    let (clean, none) = run("clean", usize::MAX).await;
    assert_eq!(none, 0);
    let (retried, failures) = run("retried", 2).await;
    assert_eq!(failures, 1, "the second batch was refused once");
    assert_eq!(retried, clean);
    assert_eq!(clean["telemetry"]["fingerprinted"], 30);
    assert_eq!(
        clean["groups"][0][0], 10,
        "v turned into a string at call 20; 20 numbers keep two thirds of 30"
    );
}
