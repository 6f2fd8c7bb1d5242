//! The split deployment: `driftline ingest`, `driftline detect` and `driftline api` as separate processes
//! over a real Apache Kafka broker and the real ClickHouse engine (deploy/local/kafka.sh and
//! deploy/local/clickhouse.sh start them unless KAFKA_BROKERS / CLICKHOUSE_URL name running ones). The same
//! scenario checks as the embedded mode run against it.

mod support;

use support::{clickhouse_url, kafka_brokers, kafka_env, run_cli, temp_dir, Deployment, Endpoints, Server};

/// Environment of every stage of one deployment: its own topics and its own database.
fn environment(name: &str) -> Vec<(String, String)> {
    let mut env = kafka_env(&kafka_brokers(), name);
    env.push(("DRIFTLINE__STORAGE__STORE".into(), "clickhouse".into()));
    env.push(("DRIFTLINE__CLICKHOUSE__URL".into(), clickhouse_url()));
    env.push((
        "DRIFTLINE__CLICKHOUSE__DATABASE".into(),
        format!("test_{}_{}", std::process::id(), name.replace('-', "_")),
    ));
    env
}

fn driftline(args: &[&str], env: &[(String, String)]) -> (i32, String, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_driftline"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("run driftline");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

struct Split {
    ingest: Server,
    detect: Server,
    api: Server,
}

impl Split {
    /// `driftline migrate`, then the three stages.
    fn start(name: &str, dir: &std::path::Path) -> Split {
        let env = environment(name);
        let (code, stdout, stderr) = driftline(&["migrate"], &env);
        assert_eq!(code, 0, "migrate failed: {stderr}");
        assert!(stdout.contains("applied migration 1") || stdout.contains("up to date"), "{stdout}");
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let stage = |stage: &str| {
            let dir = dir.join(stage);
            std::fs::create_dir_all(&dir).expect("stage dir");
            Server::start_stage(stage, &dir, None, &env)
        };
        Split { ingest: stage("ingest"), detect: stage("detect"), api: stage("api") }
    }

    fn endpoints(&self) -> Endpoints {
        Endpoints {
            api: self.api.url.clone(),
            ingest: self.ingest.url.clone(),
            metrics: vec![self.ingest.url.clone(), self.detect.url.clone(), self.api.url.clone()],
        }
    }
}

impl Deployment for Split {
    fn client(&self) -> support::Client {
        self.endpoints().client()
    }

    fn crash_and_restart(&mut self) {
        self.detect.crash_and_restart();
    }
}

#[test]
fn the_demo_scenario_on_split_stages_over_kafka_and_clickhouse() {
    let dir = temp_dir("split-demo");
    let split = Split::start("split-demo", &dir);
    support::check_demo_scenario(&split.endpoints());
    // Migrations are recorded: a second run applies nothing.
    let (code, stdout, _) = driftline(&["migrate"], &environment("split-demo"));
    assert_eq!((code, stdout.trim()), (0, format!("database test_{}_split_demo is up to date", std::process::id()).as_str()));
    // Every stage answers the operations endpoints; the detector is ready while ClickHouse and Kafka answer.
    for server in [&split.ingest, &split.detect, &split.api] {
        let client = server.client(None);
        assert_eq!(client.get("/healthz").0, 200, "{}", server.url);
        assert_eq!(client.get("/readyz").0, 200, "{}", server.url);
    }
}

#[test]
fn a_detector_killed_mid_stream_ends_where_an_uninterrupted_run_ends() {
    support::check_kill_mid_stream(|run, dir| Split::start(&format!("kill-{run}"), dir));
}

#[test]
fn a_single_stage_names_the_settings_it_needs() {
    let (code, _, stderr) = run_cli(&["detect", "--bind", "127.0.0.1:0"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("storage.bus = \"kafka\""), "{stderr}");
    let env = vec![("DRIFTLINE__STORAGE__BUS".to_owned(), "kafka".to_owned())];
    let (code, _, stderr) = driftline(&["api", "--bind", "127.0.0.1:0"], &env);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("storage.store = \"clickhouse\""), "{stderr}");
    let env = vec![("DRIFTLINE__CLICKHOUSE__URL".to_owned(), "127.0.0.1:18123".to_owned())];
    let (code, _, stderr) = driftline(&["migrate"], &env);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("clickhouse.url"), "{stderr}");
}
