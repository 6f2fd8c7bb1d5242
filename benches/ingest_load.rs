//! `make bench` (service part): starts `driftline serve` on a scratch directory and measures
//! 1. sustained ingest: client threads posting batches of spans for a fixed time (spans/s acknowledged), and
//! 2. span → queryable latency under background load: a span for a new tool is posted, then its shape
//!    endpoint is polled until the detector has stored it (p50 / p99 over the samples).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const CLIENTS: usize = 4;
const BATCH: usize = 100;
const LOAD_SECONDS: u64 = 10;
const LATENCY_SAMPLES: usize = 100;

fn new_agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

fn batch(prefix: &str, tool: &str, n: usize) -> String {
    let spans: Vec<Value> = (0..n)
        .map(|i| {
            json!({"span_id": format!("{prefix}-{i}"), "session_id": format!("s{}", i % 7), "agent_name": "load",
                "server": "load-mcp", "tool": tool, "started_at": "2026-03-26T08:15:42.000Z", "duration_ms": 12.5,
                "status": "success", "return_value": {"id": i, "title": "a result", "tags": ["x", "y"], "score": 0.5}})
        })
        .collect();
    Value::Array(spans).to_string()
}

fn post(agent: &ureq::Agent, url: &str, body: &str) -> u16 {
    agent
        .post(format!("{url}/v1/spans"))
        .header("Content-Type", "application/json")
        .send(body.as_bytes())
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

fn main() {
    let dir = std::env::temp_dir().join(format!("driftline-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut server = Command::new(env!("CARGO_BIN_EXE_driftline"))
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(&dir)
        .env("DRIFTLINE__LOG__LEVEL", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start driftline serve");
    let mut line = String::new();
    BufReader::new(server.stdout.take().expect("stdout")).read_line(&mut line).expect("address line");
    let url = line.trim().trim_start_matches("driftline listening on ").to_owned();

    // 1. Sustained ingest.
    let stop = Arc::new(AtomicBool::new(false));
    let accepted = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (stop, accepted, url) = (stop.clone(), accepted.clone(), url.clone());
            std::thread::spawn(move || {
                let agent = new_agent();
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    let body = batch(&format!("c{client}-r{round}"), &format!("tool_{client}"), BATCH);
                    if post(&agent, &url, &body) == 202 {
                        accepted.fetch_add(BATCH as u64, Ordering::Relaxed);
                    }
                    round += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(LOAD_SECONDS));
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let _ = thread.join();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total = accepted.load(Ordering::Relaxed);
    println!("ingest: {total} spans acknowledged in {elapsed:.1} s = {:.0} spans/s ({CLIENTS} clients, {BATCH} spans per request)", total as f64 / elapsed);

    // Let the detector catch up before measuring latency.
    let agent = new_agent();
    let caught_up = Instant::now();
    loop {
        let tools: Value = agent
            .get(format!("{url}/api/tools"))
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_json().ok())
            .unwrap_or(Value::Null);
        let calls: u64 =
            tools.as_array().map(|t| t.iter().filter_map(|x| x["calls"].as_u64()).sum()).unwrap_or(0);
        if calls >= total || caught_up.elapsed() > Duration::from_secs(120) {
            println!(
                "detector caught up with {calls} calls {:.1} s after the load stopped",
                caught_up.elapsed().as_secs_f64()
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    // 2. Span -> queryable latency, with one background client keeping the pipeline busy.
    let stop = Arc::new(AtomicBool::new(false));
    let background = {
        let (stop, url) = (stop.clone(), url.clone());
        std::thread::spawn(move || {
            let agent = new_agent();
            let mut round = 0;
            while !stop.load(Ordering::Relaxed) {
                post(&agent, &url, &batch(&format!("bg-{round}"), "background", BATCH));
                round += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let mut samples = Vec::with_capacity(LATENCY_SAMPLES);
    for sample in 0..LATENCY_SAMPLES {
        let tool = format!("probe_{sample}");
        let sent = Instant::now();
        assert_eq!(post(&agent, &url, &batch(&tool, &tool, 1)), 202);
        loop {
            let status = agent
                .get(format!("{url}/api/tools/load-mcp/{tool}/shape"))
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
    let _ = background.join();
    samples.sort();
    let at =
        |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).saturating_sub(1)].as_secs_f64() * 1e3;
    println!("span -> queryable: p50 {:.1} ms, p99 {:.1} ms over {LATENCY_SAMPLES} spans (background load ~{} spans/s)", at(0.5), at(0.99), BATCH * 1000 / 20);

    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
