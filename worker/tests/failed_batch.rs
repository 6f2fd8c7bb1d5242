//! A batch the store refuses is processed again from stored state: nothing counts twice, nothing is lost.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use driftline_bus::{Message, Producer, SqliteBus, Topic};
use driftline_store::testing::{Hooked, Hooks};
use driftline_store::{Batch, DetectorStore, QueryStore, SqliteStore, StoreError};
use driftline_worker::{Worker, WorkerSettings};
use serde_json::{json, Value};

/// The SQLite store, refusing the `fail_on`-th batch once.
struct Flaky {
    applies: AtomicUsize,
    fail_on: usize,
    /// The refused batch's outputs are stored, its state and positions not: what a crash of a ClickHouse
    /// detector between its inserts leaves.
    half_written: bool,
}

#[async_trait]
impl Hooks<SqliteStore> for Flaky {
    async fn apply(&self, store: &SqliteStore, batch: Batch) -> Result<(), StoreError> {
        if self.applies.fetch_add(1, Ordering::SeqCst) + 1 == self.fail_on {
            if self.half_written {
                let outputs = Batch { positions: Default::default(), states: Vec::new(), ..batch };
                store.apply(outputs).await?;
            }
            return Err(StoreError::Unavailable("injected failure".into()));
        }
        store.apply(batch).await
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

/// Runs 30 calls through a worker in batches of 7 and returns what the store then shows; `pipelined`
/// reads each batch while the one before is being written, as the running worker does.
async fn run(name: &str, fail_on: usize, half_written: bool, pipelined: bool) -> (Value, usize) {
    let dir = dir(name);
    let bus = SqliteBus::open(&dir.join("bus.db"), || 0).expect("bus");
    bus.publish((0..30).map(record).collect()).await.expect("publish");
    let store = Arc::new(Hooked {
        inner: Arc::new(SqliteStore::open(&dir.join("store.db")).expect("store")),
        hooks: Flaky { applies: AtomicUsize::new(0), fail_on, half_written },
    });
    let mut worker =
        Worker::resume(bus.consumer(), store.clone(), WorkerSettings::default()).await.expect("worker");
    let mut failures = 0;
    for _ in 0..20 {
        let polled = match pipelined {
            true => worker.step(7, Duration::ZERO).await,
            false => worker.poll_once(7, Duration::ZERO).await,
        };
        match polled {
            Ok(progress) if progress.records == 0 => break,
            Ok(_) => {}
            Err(_) => failures += 1,
        }
    }
    worker.flush().await.expect("nothing left to write");
    let shape = store.inner.tool_shape("p", "srv", "t").await.expect("shape").expect("a tool");
    // What rollups answer, an hour after the calls.
    let now = driftline_schemas::Timestamp::from_millis(1_767_229_200_000).expect("2026-01-01T01:00Z");
    let tools = store.inner.tools("p", 24, now).await.expect("tools");
    let stats = store.inner.return_value_stats("p", 24, now).await.expect("stats");
    let impact = driftline_store::ImpactQuery {
        project: "p",
        server: "srv",
        tool: "t",
        hours: 24,
        now,
        high_risk_sessions: 10,
        input_schema: None,
    };
    let impact = store.inner.drift_impact(impact).await.expect("impact");
    let view = json!({"telemetry": shape.telemetry, "window": shape.window_size, "status": shape.status,
        "groups": shape.signal_groups.iter().map(|g| (g.occurrences, g.sample_span_id.clone())).collect::<Vec<_>>(),
        "tools": tools, "stats": stats, "impact": impact});
    (view, failures)
}

#[tokio::test]
async fn a_refused_batch_is_redone_from_stored_state() {
    let (clean, none) = run("clean", usize::MAX, false, false).await;
    assert_eq!(none, 0);
    for pipelined in [false, true] {
        let (retried, failures) = run(&format!("retried-{pipelined}"), 2, false, pipelined).await;
        assert_eq!(failures, 1, "the second batch was refused once (pipelined: {pipelined})");
        assert_eq!(retried, clean, "pipelined: {pipelined}");
        // Its outputs stored without its positions: the replay must not count them again.
        let (half, failures) = run(&format!("half-written-{pipelined}"), 3, true, pipelined).await;
        assert_eq!(failures, 1, "the third batch was half written once (pipelined: {pipelined})");
        assert_eq!(half, clean, "pipelined: {pipelined}");
    }
    let (pipelined, none) = run("clean-pipelined", usize::MAX, false, true).await;
    assert_eq!(none, 0);
    assert_eq!(pipelined, clean);
    assert_eq!(clean["telemetry"]["fingerprinted"], 30);
    assert_eq!(clean["tools"][0]["calls"], 30, "{clean}");
    assert_eq!(clean["stats"]["totals"]["fingerprinted"], 30, "{clean}");
    assert_eq!(clean["impact"]["consumers"][0]["call_count"], 30, "{clean}");
    assert_eq!(
        clean["groups"][0][0], 10,
        "v turned into a string at call 20; 20 numbers keep two thirds of 30"
    );
}
