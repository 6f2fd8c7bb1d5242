//! `serve` with `storage.bus = "kafka"` against a real Apache Kafka broker (started by
//! deploy/local/kafka.sh unless KAFKA_BROKERS names one): the demo scenario, and a kill -9 in the middle of
//! a stream that ends exactly where an uninterrupted run ends.

mod support;

use support::{kafka_brokers, kafka_env, temp_dir, wait_for_calls, Server};

fn start(name: &str, dir: &std::path::Path, brokers: &str) -> Server {
    let env = kafka_env(brokers, name);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Server::start(dir, None, &env)
}

#[test]
fn the_demo_scenario_over_kafka() {
    let brokers = kafka_brokers();
    let dir = temp_dir("kafka-demo");
    let server = start("demo", &dir, &brokers);
    support::check_demo_scenario(&server.endpoints());
    // `serve` created its topics with the configured partitions; `driftline topics describe` shows them.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_driftline"))
        .args(["topics", "describe"])
        .envs(kafka_env(&brokers, "demo"))
        .output()
        .expect("topics describe");
    let listing = String::from_utf8_lossy(&output.stdout);
    assert_eq!(listing.lines().filter(|l| l.ends_with("\t4 partitions")).count(), 4, "{listing}");
}

#[test]
fn a_kill_mid_stream_over_kafka_ends_where_an_uninterrupted_run_ends() {
    let brokers = kafka_brokers();
    // Each run has its own topics, written alike, so event ids (from Kafka positions) agree.
    support::check_kill_mid_stream(|run, dir| start(&format!("kill-{run}"), dir, &brokers));
}

#[test]
fn a_broker_outage_is_503_and_nothing_acknowledged_is_lost() {
    let dir = temp_dir("kafka-outage");
    // A broker of the test's own (other ports, other data), so stopping it disturbs no other test.
    let broker = support::LocalService::start(
        "kafka.sh",
        vec![
            ("KAFKA_PORT".into(), "19192".into()),
            ("KAFKA_CONTROLLER_PORT".into(), "19193".into()),
            ("DRIFTLINE_INFRA_DIR".into(), dir.join("infra").display().to_string()),
        ],
    );
    let data = dir.join("serve");
    std::fs::create_dir_all(&data).expect("data dir");
    let server = start("outage", &data, "127.0.0.1:19192");
    // While the broker restarts, the idempotent producer may hold a request for a while before answering.
    let client = support::patient_client(&server.url, 120);
    let batch = |from: usize| {
        serde_json::Value::Array(
            (from..from + 10)
                .map(|i| support::span(&format!("o{i}"), "lookup", serde_json::json!({"i": i})))
                .collect(),
        )
    };
    assert_eq!(client.post_json("/v1/spans", &batch(0)).0, 202);
    wait_for_calls(&client, 10);

    broker.run("down");
    let (status, answer) = client.post_json("/v1/spans", &batch(100));
    assert_eq!(status, 503, "{answer}");
    assert!(answer["error"].as_str().is_some_and(|e| e.contains("nothing was stored")), "{answer}");

    broker.run("up");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (status, _) = client.post_json("/v1/spans", &batch(200));
        if status == 202 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "ingest did not recover within 60 s of the broker's return"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    // The detector retries with capped backoff (10 s), so give it a minute after the broker's return.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let calls = loop {
        let calls = client.get("/api/tools").1[0]["calls"].as_u64().unwrap_or(0);
        if calls >= 20 || std::time::Instant::now() > deadline {
            break calls;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    // Both acknowledged batches are there; a refused batch may also have arrived late (at-least-once).
    assert!(calls >= 20, "{calls} calls processed after the outage; expected at least the 20 acknowledged");
}

#[test]
fn consumer_lag_over_kafka_tells_the_truth_under_overload() {
    let brokers = kafka_brokers();
    let dir = temp_dir("kafka-lag");
    let mut env = kafka_env(&brokers, "lag");
    env.push(("DRIFTLINE__DETECTOR__TEST_BATCH_PAUSE_MS".into(), "1000".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = Server::start(&dir, None, &env);
    support::check_lag_tells_the_truth(&server);
}

/// A detector still joining its group owns no partition, yet records wait: its lag gauge reports the
/// group's backlog (high watermark minus the group's committed offset), not 0.
#[test]
fn before_its_first_assignment_a_detector_reports_the_groups_backlog() {
    use driftline_bus::{Consumer, KafkaBus, KafkaSettings, Message, Positions, Producer, Topic};
    let settings = KafkaSettings {
        brokers: kafka_brokers(),
        topic_prefix: format!("backlog-{}.", std::process::id()),
        partitions: 4,
        replication: 1,
        session_timeout_ms: 10_000,
        instance_id: None,
        client_properties: Default::default(),
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let bus = KafkaBus::connect(settings).expect("connect");
        bus.ensure_topics().await.expect("topics");
        let messages = (0..30)
            .map(|i| Message { topic: Topic::Spans, key: format!("tool-{i}"), payload: b"{}".to_vec() })
            .collect();
        bus.publish(messages).await.expect("publish");
        // Never polled: not subscribed, so no partition is or will be assigned.
        let consumer = bus.consumer().expect("consumer");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut lags = Default::default();
        while std::time::Instant::now() < deadline {
            lags = consumer.lag(&Positions::new()).await.expect("lag");
            // A topic created just now may not be in the broker's metadata at the first refreshes.
            if lags.values().sum::<u64>() == 30 && lags.len() == 12 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(lags.values().sum::<u64>(), 30, "the group's backlog, per partition: {lags:?}");
        let spans: u64 = lags.iter().filter(|(label, _)| label.starts_with("spans/")).map(|(_, n)| n).sum();
        assert_eq!(spans, 30, "all of it on the spans topic: {lags:?}");
        assert_eq!(lags.len(), 12, "every partition of the three input topics: {lags:?}");
    });
}
