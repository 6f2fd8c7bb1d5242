//! `make bench-repeats`, second part: the detector's speed as calls pile up (#42). For each store (SQLite;
//! ClickHouse at `CLICKHOUSE_URL`, default the local one), the store is filled, cumulatively, with the call
//! identities of `VOLUME_STORED` calls (comma list, default `0,10000000,50000000`) received over the last
//! 24 hours — what telling a call sent again reads — and at each volume a real worker, started afresh (its
//! takeover timed apart), reads `VOLUME_CALLS` (200,000) new calls from the bus in batches of up to `VOLUME_BATCH` (20,000): spans/s at each volume next
//! to the same run's empty-store figure. `VOLUME_STORES` picks the paths (`sqlite,kafka+clickhouse`):
//! `sqlite` is the embedded path (embedded bus, SQLite), `clickhouse` the embedded bus on ClickHouse, and
//! `kafka+clickhouse` the split deployment's (Kafka at `KAFKA_BROKERS`, default the local broker, four
//! partitions). Figures go to `target/bench-volume.json`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use driftline_bus::{Consumer, KafkaBus, KafkaSettings, Message, Producer, SqliteBus, Topic};
use driftline_schemas::{InputPosition, Timestamp};
use driftline_store::{Batch, CallIdentity, ClickHouseSettings, ClickHouseStore, DetectorStore, SqliteStore};
use driftline_worker::{Worker, WorkerSettings};
use serde_json::json;

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|s| s.trim().replace('_', ""))
        .filter(|s| !s.is_empty())
        .collect()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Adds `count` identities (numbered from `first`) received over the last 24 hours, in batches.
async fn fill(store: &Arc<dyn DetectorStore>, first: u64, count: u64) -> f64 {
    let started = Instant::now();
    let now = now_ms();
    let chunk = 200_000u64;
    let mut next = first;
    while next < first + count {
        let end = (next + chunk).min(first + count);
        let identities = (next..end)
            .map(|i| {
                let identity =
                    format!("{:032x}", (u128::from(i) << 64) ^ 0x9e37_79b9_7f4a_7c15_0000_0000_0000_0001);
                let received_at = Timestamp::from_millis(now - (i % 86_000) as i64 * 1000).expect("a time");
                CallIdentity {
                    identity,
                    position: InputPosition { partition: 0, offset: (1 << 40) | i },
                    received_at,
                }
            })
            .collect();
        store.apply(Batch { call_identities: identities, ..Default::default() }).await.expect("filled");
        next = end;
    }
    started.elapsed().as_secs_f64()
}

fn call(run: usize, i: usize) -> Message {
    let tool = format!("tool_{}", i % 20);
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let payload = json!({"project": "volume", "span_id": format!("r{run}-{i}"), "session_id": format!("s{}", i % 500),
        "agent_name": format!("agent-{}", i % 50), "server": "srv", "tool": tool, "started_at": at, "duration_ms": 12.5,
        "status": "success", "ingested_at": at, "shape": "{id:number,items:[string]}", "shape_hash": "aaaaaaaa",
        "compact_bytes": 120, "shape_outcome": "fingerprinted"});
    Message {
        topic: Topic::Spans,
        key: format!("volume/srv/{tool}"),
        payload: payload.to_string().into_bytes(),
    }
}

struct Row {
    store: String,
    stored: u64,
    fill_seconds: f64,
    takeover_seconds: f64,
    spans_per_second: f64,
}

async fn run<P: Producer, C: Consumer>(
    name: &str,
    store: Arc<dyn DetectorStore>,
    bus: &P,
    consumer: impl Fn() -> C,
    volumes: &[u64],
    calls: usize,
    batch: usize,
) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut stored = 0;
    for (run, &volume) in volumes.iter().enumerate() {
        let fill_seconds = fill(&store, stored, volume.saturating_sub(stored)).await;
        stored = stored.max(volume);
        for chunk in (0..calls).collect::<Vec<_>>().chunks(10_000) {
            bus.publish(chunk.iter().map(|&i| call(run, i)).collect()).await.expect("publish");
        }
        // A worker started afresh: on Kafka it joins the group and takes its streams at its first polls, so
        // the takeover is timed to the end of the first batch read and the speed from there on.
        let started = Instant::now();
        let mut worker =
            Worker::resume(consumer(), store.clone(), WorkerSettings::default()).await.expect("worker");
        let deadline = started + Duration::from_secs(1800);
        let mut read = 0;
        let mut first: Option<(Instant, usize)> = None;
        while read < calls {
            assert!(Instant::now() < deadline, "{name}: only {read} of {calls} calls read in 30 minutes");
            let progress = worker.poll_once(batch, Duration::from_millis(200)).await.expect("a batch");
            read += progress.records;
            if first.is_none() && progress.records > 0 {
                first = Some((Instant::now(), progress.records));
            }
        }
        let finished = Instant::now();
        assert_eq!(read, calls, "every call read once");
        let (first_done, first_records) = first.unwrap_or((started, 0));
        let measured = (finished - first_done).as_secs_f64();
        let row = Row {
            store: name.into(),
            stored,
            fill_seconds,
            takeover_seconds: (first_done - started).as_secs_f64(),
            spans_per_second: if measured > 0.0 { (calls - first_records) as f64 / measured } else { 0.0 },
        };
        println!(
            "{name}: {} calls stored: {:.0} spans/s ({:.2} s to take over and read a first batch; filled in {:.1} s)",
            row.stored, row.spans_per_second, row.takeover_seconds, row.fill_seconds
        );
        rows.push(row);
        drop(worker);
    }
    rows
}

fn clickhouse_url() -> String {
    std::env::var("CLICKHOUSE_URL").unwrap_or_else(|_| "http://127.0.0.1:18123".into())
}

/// A ClickHouse store in a database of its own (dropped by [`drop_bench_databases`]).
async fn clickhouse() -> Arc<dyn DetectorStore> {
    let settings = ClickHouseSettings {
        url: clickhouse_url(),
        database: format!("bench_volume_{}_{}", std::process::id(), now_ms()),
        user: None,
        password: None,
    };
    driftline_store::migrate_clickhouse(&settings).await.expect("migrate");
    Arc::new(ClickHouseStore::connect(&settings).await.expect("connect"))
}

/// Drops the databases this run made: 50 million identities take gigabytes.
fn drop_bench_databases() {
    let prefix = format!("bench_volume_{}_", std::process::id());
    let sql =
        |query: String| ureq::post(&clickhouse_url()).send(query).ok()?.body_mut().read_to_string().ok();
    let names = sql(format!("SELECT name FROM system.databases WHERE startsWith(name, '{prefix}')"));
    for name in names.unwrap_or_default().lines().filter(|name| name.starts_with(&prefix)) {
        let _ = sql(format!("DROP DATABASE IF EXISTS {name}"));
    }
}

fn main() {
    let volumes: Vec<u64> =
        env_list("VOLUME_STORED", "0,10000000,50000000").iter().filter_map(|v| v.parse().ok()).collect();
    let calls: usize = std::env::var("VOLUME_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let batch: usize = std::env::var("VOLUME_BATCH").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let dir = std::env::temp_dir().join(format!("driftline-bench-volume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let mut all = Vec::new();
    for name in env_list("VOLUME_STORES", "sqlite,kafka+clickhouse") {
        let rows = runtime.block_on(async {
            match name.as_str() {
                "sqlite" | "clickhouse" => {
                    let bus = SqliteBus::open(&dir.join(format!("{name}-bus.db")), now_ms).expect("bus");
                    let store: Arc<dyn DetectorStore> = if name == "sqlite" {
                        Arc::new(SqliteStore::open(&dir.join("store.db")).expect("store"))
                    } else {
                        clickhouse().await
                    };
                    run(&name, store, &bus, || bus.consumer(), &volumes, calls, batch).await
                }
                "kafka+clickhouse" => {
                    let bus = KafkaBus::connect(KafkaSettings {
                        brokers: std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:19092".into()),
                        topic_prefix: format!("bench-volume-{}-{}.", std::process::id(), now_ms()),
                        partitions: 4,
                        replication: 1,
                        session_timeout_ms: 10_000,
                        instance_id: None,
                        client_properties: Default::default(),
                    })
                    .expect("kafka");
                    bus.ensure_topics().await.expect("topics");
                    run(
                        &name,
                        clickhouse().await,
                        &bus,
                        || bus.consumer().expect("consumer"),
                        &volumes,
                        calls,
                        batch,
                    )
                    .await
                }
                other => {
                    panic!("VOLUME_STORES: unknown path {other:?} (sqlite, clickhouse, kafka+clickhouse)")
                }
            }
        });
        all.extend(rows);
    }
    println!("\n| store | calls stored | spans/s | vs empty | takeover |");
    println!("|---|---|---|---|---|");
    let mut json = Vec::new();
    for row in &all {
        let empty =
            all.iter().find(|r| r.store == row.store).map_or(row.spans_per_second, |r| r.spans_per_second);
        println!(
            "| {} | {} | {:.0} | {:.0} % | {:.2} s |",
            row.store,
            row.stored,
            row.spans_per_second,
            100.0 * row.spans_per_second / empty,
            row.takeover_seconds
        );
        json.push(json!({"store": row.store, "stored": row.stored, "spans_per_second": row.spans_per_second,
            "vs_empty": row.spans_per_second / empty, "takeover_seconds": row.takeover_seconds, "fill_seconds": row.fill_seconds}));
    }
    let _ = std::fs::create_dir_all("target");
    let _ =
        std::fs::write("target/bench-volume.json", serde_json::to_string_pretty(&json).unwrap_or_default());
    let _ = std::fs::remove_dir_all(&dir);
    drop_bench_databases();
}
