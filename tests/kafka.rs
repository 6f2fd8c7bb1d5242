//! `serve` with `storage.bus = "kafka"` against a real Apache Kafka broker (started by
//! deploy/local/kafka.sh unless KAFKA_BROKERS names one): the demo scenario, and a kill -9 in the middle of
//! a stream that ends exactly where an uninterrupted run ends.

mod support;

use support::{kafka_brokers, kafka_env, outputs, stream_part, temp_dir, wait_for_calls, Server};

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
    support::check_demo_scenario(&server);
    // `serve` created its topics with the configured partitions; `driftline topics describe` shows them.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_driftline"))
        .args(["topics", "describe"])
        .envs(kafka_env(&brokers, "demo"))
        .output()
        .expect("topics describe");
    let listing = String::from_utf8_lossy(&output.stdout);
    assert_eq!(listing.lines().filter(|l| l.ends_with("\t4 partitions")).count(), 3, "{listing}");
}

#[test]
fn a_kill_mid_stream_over_kafka_ends_where_an_uninterrupted_run_ends() {
    let brokers = kafka_brokers();
    let parts = 4;
    let uninterrupted = {
        let dir = temp_dir("kafka-uninterrupted");
        let server = start("uninterrupted", &dir, &brokers);
        let client = server.client(None);
        for part in 0..parts {
            stream_part(&client, part);
        }
        wait_for_calls(&client, 30 * parts as u64);
        outputs(&client)
    };
    let dir = temp_dir("kafka-restarted");
    let first = start("restarted", &dir, &brokers);
    let client = first.client(None);
    stream_part(&client, 0);
    stream_part(&client, 1);
    first.kill();
    let second = start("restarted", &dir, &brokers);
    let client = second.client(None);
    stream_part(&client, 2);
    stream_part(&client, 3);
    wait_for_calls(&client, 30 * parts as u64);
    let restarted = outputs(&client);
    // Event ids depend on Kafka positions, which both runs share (each has its own topics, written alike).
    assert_eq!(restarted, uninterrupted);
    assert!(restarted["events"].as_array().is_some_and(|e| e.len() >= 2), "{restarted}");
}
