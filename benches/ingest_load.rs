//! `make bench` (service part) measures, on `driftline serve` (embedded) or, with
//! `DRIFTLINE_BENCH_MODE=split` (`make bench-distributed`, after `make infra-up`), on separate
//! `driftline ingest | detect | api` processes over Kafka and ClickHouse:
//! 1. sustained ingest: client threads posting batches of spans for 10 s or 1,000,000 spans (spans/s
//!    acknowledged); in split mode next to a plain rdkafka producer sending the same spans with the same
//!    settings;
//! 2. detector throughput on the backlog, alone: spans/s by its stored-records counter, from its first
//!    stored batch;
//! 3. span → queryable latency at 10,000 spans/s of background load: a span for a new tool is posted, then
//!    its shape endpoint is polled until the detector has stored it (p50 / p99 over the samples);
//! 4. in split mode, recovery after kill -9 of the detector with a backlog: restart to caught up;
//! 5. embedded, the memory of 3,000 idle keep-alive connections and `/metrics` under made-up methods.
//!
//! Figures go to `target/bench/service-{embedded,split}.json` for `scripts/bench-summary.py`.
//! `DRIFTLINE_BENCH_LOG=info` shows the stages' logs (default `warn`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const CLIENTS: usize = 4;
const BATCH: usize = 100;
const LOAD_SECONDS: u64 = 10;
const LATENCY_SAMPLES: usize = 100;
/// The load stops here (or after `LOAD_SECONDS`): the detector is timed on backlogs of one size, since its
/// rate depends on how many calls the store already holds.
const LOAD_SPANS: u64 = 1_000_000;

fn new_agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

/// Now (RFC 3339): calls count when they were made.
fn started_at() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn spans(prefix: &str, tool: &str, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            json!({"span_id": format!("{prefix}-{i}"), "session_id": format!("s{}", i % 7), "agent_name": "load",
                "server": "load-mcp", "tool": tool, "started_at": started_at(), "duration_ms": 12.5,
                "status": "success", "return_value": {"id": i, "title": "a result", "tags": ["x", "y"], "score": 0.5}})
        })
        .collect()
}

fn batch(prefix: &str, tool: &str, n: usize) -> String {
    Value::Array(spans(prefix, tool, n)).to_string()
}

fn post(agent: &ureq::Agent, url: &str, body: &str) -> u16 {
    agent
        .post(format!("{url}/v1/spans"))
        .header("Content-Type", "application/json")
        .send(body.as_bytes())
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

/// Starts `driftline <stage>` and returns it with its address.
fn start(stage: &str, dir: &std::path::Path, env: &[(String, String)]) -> (Child, String) {
    std::fs::create_dir_all(dir).expect("scratch dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_driftline"))
        .args([stage, "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .env("DRIFTLINE__LOG__LEVEL", std::env::var("DRIFTLINE_BENCH_LOG").unwrap_or_else(|_| "warn".into()))
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("start driftline {stage}: {err}"));
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("address line");
    (child, line.trim().trim_start_matches("driftline listening on ").to_owned())
}

/// Spans acknowledged per second by `CLIENTS` threads for `LOAD_SECONDS` (or up to `LOAD_SPANS`);
/// returns the total and the rate.
fn sustained_ingest(url: &str) -> (u64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let accepted = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (stop, accepted, url) = (stop.clone(), accepted.clone(), url.to_owned());
            std::thread::spawn(move || {
                let agent = new_agent();
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    let body = batch(&format!("c{client}-r{round}"), &format!("tool_{client}"), BATCH);
                    if post(&agent, &url, &body) == 202
                        && accepted.fetch_add(BATCH as u64, Ordering::Relaxed) + BATCH as u64 >= LOAD_SPANS
                    {
                        stop.store(true, Ordering::Relaxed);
                    }
                    round += 1;
                }
            })
        })
        .collect();
    while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(LOAD_SECONDS) {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let _ = thread.join();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total = accepted.load(Ordering::Relaxed);
    let rate = total as f64 / elapsed;
    println!("ingest: {total} spans acknowledged in {elapsed:.1} s = {rate:.0} spans/s ({CLIENTS} clients, {BATCH} spans per request)");
    (total, rate)
}

fn calls(agent: &ureq::Agent, api: &str) -> u64 {
    let tools: Value = agent
        .get(format!("{api}/api/tools"))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_json().ok())
        .unwrap_or(Value::Null);
    tools.as_array().map(|t| t.iter().filter_map(|x| x["calls"].as_u64()).sum()).unwrap_or(0)
}

/// Records the detector has stored (its own counter: polling `/api/tools`, which scans every call, would
/// compete with the detector for the machine and measure the query as much as the detector).
fn stored_records(agent: &ureq::Agent, detector: &str) -> u64 {
    let text = agent
        .get(format!("{detector}/metrics"))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .unwrap_or_default();
    text.lines()
        .find_map(|line| line.strip_prefix("driftline_worker_batch_records_sum "))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map_or(0, |value| value as u64)
}

/// Waits until the detector at `detector` has stored `total` records, then checks that `api` answers with
/// all `total` calls; returns the detector's rate (spans/s over the backlog).
/// The rate is timed from the first stored batch (a detector joining a consumer group waits for its
/// partitions first; that wait is printed apart).
fn catch_up(api: &str, detector: &str, total: u64, what: &str) -> f64 {
    let agent = new_agent();
    let started = Instant::now();
    let before = stored_records(&agent, detector);
    let mut first: Option<(Instant, u64)> = None;
    loop {
        let now = stored_records(&agent, detector);
        if first.is_none() && now > before {
            first = Some((Instant::now(), now));
        }
        if now >= total || started.elapsed() > Duration::from_secs(300) {
            let seconds = started.elapsed().as_secs_f64();
            let queryable = calls(&agent, api);
            let (from, counted) = first.unwrap_or((started, before));
            let rate = (now - counted) as f64 / from.elapsed().as_secs_f64().max(0.001);
            println!(
                "{what}: {now} records stored {seconds:.1} s later ({rate:.0} spans/s over the backlog of {}, from the first stored batch {:.2} s after the start); {queryable} calls queryable",
                total.saturating_sub(before),
                (from - started).as_secs_f64()
            );
            return rate;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `total` calls are queryable through the API; returns the rate (spans/s over the backlog).
/// (The split stages' detector restarts in between, and its counter with it.)
fn catch_up_by_api(api: &str, total: u64, what: &str) -> f64 {
    let agent = new_agent();
    let started = Instant::now();
    let before = calls(&agent, api);
    loop {
        let now = calls(&agent, api);
        if now >= total || started.elapsed() > Duration::from_secs(300) {
            let seconds = started.elapsed().as_secs_f64();
            let rate = (now - before) as f64 / seconds.max(0.001);
            println!(
                "{what}: {now} calls queryable {seconds:.1} s later ({rate:.0} spans/s over the backlog of {})",
                total.saturating_sub(before)
            );
            return rate;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The background load of the latency probe, in spans per second (the target rate).
const BACKGROUND_SPANS_PER_SECOND: u64 = 10_000;

/// Span → queryable latency with background clients keeping the pipeline busy at
/// `BACKGROUND_SPANS_PER_SECOND` (two senders, each one request of `BATCH` spans per slot, paced by the
/// clock: one alone waits too long on its answers to keep the pace over Kafka).
fn latency(ingest: &str, api: &str) -> Value {
    const SENDERS: u32 = 2;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let background: Vec<_> = (0..SENDERS)
        .map(|sender| {
            let (stop, sent, url) = (stop.clone(), sent.clone(), ingest.to_owned());
            std::thread::spawn(move || {
                let agent = new_agent();
                let rate = BACKGROUND_SPANS_PER_SECOND as f64 / f64::from(SENDERS);
                let slot = Duration::from_secs_f64(BATCH as f64 / rate);
                let mut round = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let body = batch(&format!("bg{sender}-{round}"), "background", BATCH);
                    if post(&agent, &url, &body) == 202 {
                        sent.fetch_add(BATCH as u64, Ordering::Relaxed);
                    }
                    round += 1;
                    if let Some(wait) = (slot * round).checked_sub(started.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
            })
        })
        .collect();
    let agent = new_agent();
    let mut samples = Vec::with_capacity(LATENCY_SAMPLES);
    for sample in 0..LATENCY_SAMPLES {
        let tool = format!("probe_{sample}");
        let sent = Instant::now();
        assert_eq!(post(&agent, ingest, &batch(&tool, &tool, 1)), 202);
        loop {
            let status = agent
                .get(format!("{api}/api/tools/load-mcp/{tool}/shape"))
                .call()
                .map(|r| r.status().as_u16())
                .unwrap_or(0);
            if status == 200 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        samples.push(sent.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    for sender in background {
        let _ = sender.join();
    }
    let load = sent.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    samples.sort();
    let at =
        |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).saturating_sub(1)].as_secs_f64() * 1e3;
    println!("span -> queryable: p50 {:.1} ms, p99 {:.1} ms over {LATENCY_SAMPLES} spans (background load {load:.0} spans/s)", at(0.5), at(0.99));
    json!({"p50_ms": at(0.5), "p99_ms": at(0.99), "background_spans_per_second": load, "samples": LATENCY_SAMPLES})
}

/// Resident memory of a process, from /proc (kB).
fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix("VmRSS:").and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

/// Memory of `IDLE_CONNECTIONS` idle keep-alive connections: each answers one `GET /healthz` and then
/// sends nothing; the server's resident memory before and after.
const IDLE_CONNECTIONS: usize = 3_000;

fn idle_connections(url: &str, pid: u32, server: &str) -> Value {
    use std::io::{Read, Write};
    let address = url.trim_start_matches("http://").to_owned();
    let before = rss_kb(pid);
    let mut open = Vec::with_capacity(IDLE_CONNECTIONS);
    let mut answered = 0;
    for _ in 0..IDLE_CONNECTIONS {
        let Ok(mut stream) = std::net::TcpStream::connect(&address) else { break };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let request = format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\n\r\n");
        let mut buffer = [0u8; 512];
        if stream.write_all(request.as_bytes()).is_ok() && stream.read(&mut buffer).is_ok_and(|n| n > 0) {
            answered += 1;
        }
        open.push(stream);
    }
    // Let the server settle with every connection idle.
    std::thread::sleep(Duration::from_millis(500));
    let after = rss_kb(pid);
    drop(open);
    let grown_mb = after.saturating_sub(before) as f64 / 1024.0;
    println!(
        "{answered} idle keep-alive connections on {server}: resident memory {:.1} -> {:.1} MB (+{grown_mb:.1} MB, {:.1} kB each)",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        after.saturating_sub(before) as f64 / answered.max(1) as f64
    );
    json!({"connections": answered, "rss_before_mb": before as f64 / 1024.0, "rss_after_mb": after as f64 / 1024.0,
        "grown_mb": grown_mb})
}

/// `/metrics` before and after requests with made-up methods and paths (their labels must come from a
/// closed set).
fn hostile_metrics(url: &str) -> Value {
    use std::io::{Read, Write};
    let agent = new_agent();
    // Series (lines that are not comments) and bytes: values grow by a digit now and then, series must not.
    let size = || {
        let text = agent
            .get(format!("{url}/metrics"))
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
            .unwrap_or_default();
        (text.lines().filter(|line| !line.starts_with('#')).count(), text.len())
    };
    let address = url.trim_start_matches("http://").to_owned();
    let requests = 500;
    let hostile = |round: usize| {
        for i in 0..requests {
            let Ok(mut stream) = std::net::TcpStream::connect(&address) else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let request = format!(
                "BREW{round}x{i} /no/such/path/{i} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = stream.write_all(request.as_bytes());
            let _ = stream.read(&mut [0u8; 512]);
        }
    };
    let before = size();
    hostile(0);
    let once = size();
    hostile(1);
    let twice = size();
    println!(
        "/metrics: {} series ({} bytes); {} ({} bytes) after {requests} requests with unknown methods and paths, {} ({} bytes) after {}",
        before.0, before.1, once.0, once.1, twice.0, twice.1, 2 * requests
    );
    json!({"series_before": before.0, "series_after_first": once.0, "series_after_second": twice.0,
        "bytes_before": before.1, "bytes_after_first": once.1, "bytes_after_second": twice.1,
        "hostile_requests_each": requests})
}

/// Writes one mode's figures where `scripts/bench-summary.py` reads them.
fn write_figures(mode: &str, figures: &Value) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("service-{mode}.json"));
    if let Err(err) = std::fs::write(&path, figures.to_string()) {
        eprintln!("cannot write {}: {err}", path.display());
    }
}

/// A plain rdkafka producer (acks=all, idempotent, lz4, linger 5 ms, as ingest's) sending the same spans
/// from `CLIENTS` threads for `LOAD_SECONDS`: the ceiling ingest is compared with.
fn raw_producer(brokers: &str, topic: &str) -> f64 {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("compression.type", "lz4")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let acknowledged = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let (producer, acknowledged, topic) =
                    (producer.clone(), acknowledged.clone(), topic.to_owned());
                tokio::spawn(async move {
                    let mut round = 0;
                    while started.elapsed() < Duration::from_secs(LOAD_SECONDS) {
                        let tool = format!("tool_{client}");
                        let key = format!("default/load-mcp/{tool}");
                        let payloads: Vec<String> = spans(&format!("raw{client}-{round}"), &tool, BATCH)
                            .iter()
                            .map(|span| span.to_string())
                            .collect();
                        let sends = payloads.iter().map(|payload| {
                            producer.send(
                                FutureRecord::to(&topic).key(&key).payload(payload),
                                Duration::from_secs(10),
                            )
                        });
                        let ok =
                            futures_util::future::join_all(sends).await.iter().filter(|r| r.is_ok()).count();
                        acknowledged.fetch_add(ok as u64, Ordering::Relaxed);
                        round += 1;
                    }
                })
            })
            .collect();
        for task in tasks {
            let _ = task.await;
        }
    });
    let rate = acknowledged.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    println!(
        "raw rdkafka producer, same spans and settings, {CLIENTS} senders of {BATCH}: {rate:.0} spans/s"
    );
    rate
}

fn main() {
    let dir = std::env::temp_dir().join(format!("driftline-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let split = std::env::var("DRIFTLINE_BENCH_MODE").is_ok_and(|m| m == "split");
    if !split {
        // The detector pauses during the load (it would share the two cores with ingest); to time it alone,
        // on the backlog, the server is stopped and started again (acknowledged spans are on the bus), and
        // the new process is timed until it has stored the rest.
        // Room for the idle connections (the default cap is 1,024).
        let more = [("DRIFTLINE__SERVER__MAX_CONNECTIONS".to_owned(), "4096".to_owned())];
        // Idle connections on a server that has served nothing: a server after a load keeps the heap that
        // load freed and places connections in it, which hides what each one costs.
        let (mut server, url) = start("serve", &dir.join("fresh"), &more);
        let idle = idle_connections(&url, server.id(), "a fresh server");
        let _ = server.kill();
        let _ = server.wait();
        let paused = [("DRIFTLINE__DETECTOR__TEST_BATCH_PAUSE_MS".to_owned(), "10000".to_owned())];
        let (mut server, url) = start("serve", &dir, &paused);
        let (total, ingest) = sustained_ingest(&url);
        let stored = stored_records(&new_agent(), &url);
        let _ = server.kill();
        let _ = server.wait();
        let (mut server, url) = start("serve", &dir, &more);
        let detector = catch_up(&url, &url, total - stored, "detector");
        let latency = latency(&url, &url);
        let idle_after_load = idle_connections(&url, server.id(), "the server after the load");
        let metrics = hostile_metrics(&url);
        write_figures(
            "embedded",
            &json!({"ingest_spans_per_second": ingest, "detector_spans_per_second": detector,
                "detector_backlog": total - stored, "latency": latency, "idle_connections": idle,
                "idle_connections_after_load": idle_after_load, "metrics": metrics}),
        );
        let _ = server.kill();
        let _ = server.wait();
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let brokers = std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:19092".into());
    let run = format!("bench{}", std::process::id());
    let env = vec![
        ("DRIFTLINE__STORAGE__BUS".to_owned(), "kafka".to_owned()),
        ("DRIFTLINE__STORAGE__STORE".to_owned(), "clickhouse".to_owned()),
        ("DRIFTLINE__KAFKA__BROKERS".to_owned(), brokers.clone()),
        ("DRIFTLINE__KAFKA__TOPIC_PREFIX".to_owned(), format!("{run}.")),
        (
            "DRIFTLINE__CLICKHOUSE__URL".to_owned(),
            std::env::var("CLICKHOUSE_URL").unwrap_or_else(|_| "http://127.0.0.1:18123".into()),
        ),
        ("DRIFTLINE__CLICKHOUSE__DATABASE".to_owned(), run.clone()),
    ];
    let status = Command::new(env!("CARGO_BIN_EXE_driftline"))
        .arg("migrate")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .status()
        .expect("driftline migrate");
    assert!(status.success(), "driftline migrate failed: is `make infra-up` running?");
    let (mut ingest, ingest_url) = start("ingest", &dir.join("ingest"), &env);
    let (mut api, api_url) = start("api", &dir.join("api"), &env);
    // The raw producer writes to a topic of its own, so the detector's input is only what ingest sent.
    let status = Command::new(env!("CARGO_BIN_EXE_driftline"))
        .args(["topics", "create"])
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("DRIFTLINE__KAFKA__TOPIC_PREFIX", format!("{run}-raw."))
        .stdout(Stdio::null())
        .status()
        .expect("topics create");
    assert!(status.success());
    let raw = raw_producer(&brokers, &format!("{run}-raw.spans"));
    // Ingest first with no detector running, so the detector's rate is measured on a backlog.
    let (total, rate) = sustained_ingest(&ingest_url);
    println!("ingest / raw producer: {:.2}", rate / raw);
    // Static membership, as the Helm chart runs detectors (the pod name): a restarted detector takes its
    // partitions back at once instead of after the session timeout.
    let mut detect_env = env.clone();
    detect_env.push(("DRIFTLINE__KAFKA__INSTANCE_ID".to_owned(), format!("{run}-detect-0")));
    let env = detect_env;
    let (mut detect, detect_url) = start("detect", &dir.join("detect"), &env);
    let half = total / 2;
    let detector = catch_up(&api_url, &detect_url, half, "one detector, first half of the backlog");
    let _ = detect.kill();
    let _ = detect.wait();
    let restarted = Instant::now();
    let (mut detect, _) = start("detect", &dir.join("detect"), &env);
    let restart_seconds = restarted.elapsed().as_secs_f64();
    println!("detector restarted after kill -9 in {restart_seconds:.2} s (process start to listening)");
    let after_kill = catch_up_by_api(&api_url, total, "after the kill, rest of the backlog");
    let latency = latency(&ingest_url, &api_url);
    write_figures(
        "split",
        &json!({"raw_producer_spans_per_second": raw, "ingest_spans_per_second": rate,
            "detector_spans_per_second": detector, "detector_backlog": half,
            "restart_seconds": restart_seconds, "after_kill_spans_per_second": after_kill, "latency": latency}),
    );
    for child in [&mut ingest, &mut detect, &mut api] {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
