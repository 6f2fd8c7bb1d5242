//! Active probing against real MCP servers: one built with rmcp inside the test (pagination, a tool list
//! that changes between probes, a server that stops answering in time and recovers), and one on the
//! official Python SDK (`tests/mcp/catalog_server.py`) over stdio, SSE and Streamable HTTP; and
//! `driftline capture` against them; and webhooks told of the drift and of DOWN/UP.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::handler::server::ServerHandler;
use rmcp::model::{ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer};
use serde_json::{json, Value};
use support::{
    catalog_over_http, catalog_pid, catalog_server, process_exists, python, run_cli, temp_dir, wait_until,
    webhook_signature, Server, WebhookReceiver,
};

const PAGE: usize = 2;

/// An MCP server whose tools the test changes, serving them two per page.
#[derive(Clone)]
struct Catalog {
    tools: Arc<Mutex<Vec<Tool>>>,
    slow: Arc<AtomicBool>,
}

impl ServerHandler for Catalog {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        if self.slow.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        let start: usize = request.and_then(|r| r.cursor).and_then(|c| c.parse().ok()).unwrap_or(0);
        let tools = self.tools.lock().map(|t| t.clone()).unwrap_or_default();
        let end = (start + PAGE).min(tools.len());
        let mut page =
            ListToolsResult::with_all_items(tools.get(start..end).map(<[Tool]>::to_vec).unwrap_or_default());
        if end < tools.len() {
            page.next_cursor = Some(end.to_string());
        }
        Ok(page)
    }
}

fn tool(name: &str, required: &[&str]) -> Tool {
    let schema = json!({"type": "object", "properties": {"q": {"type": "string"}, "region": {"type": "string"}}, "required": required});
    let Value::Object(schema) = schema else { unreachable!("a JSON object") };
    Tool::new(name.to_owned(), format!("The {name} tool"), Arc::new(schema))
}

/// Serves the catalog on a free loopback port from a background runtime; returns the endpoint.
fn serve_mcp(catalog: Catalog) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async move {
            let service = StreamableHttpService::new(
                move || Ok(catalog.clone()),
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default(),
            );
            let app = axum::Router::new().nest_service("/mcp", service);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let address = listener.local_addr().expect("address");
            let _ = tx.send(format!("http://{address}/mcp"));
            let _ = axum::serve(listener, app).await;
        });
    });
    rx.recv_timeout(Duration::from_secs(10)).expect("MCP server started")
}

#[test]
fn probes_follow_pages_see_changes_and_mark_a_silent_server_down() {
    let catalog = Catalog {
        tools: Arc::new(Mutex::new((0..5).map(|i| tool(&format!("tool_{i}"), &["q"])).collect())),
        slow: Arc::new(AtomicBool::new(false)),
    };
    let endpoint = serve_mcp(catalog.clone());
    let dir = temp_dir("probe");
    let config = dir.join("driftline.toml");
    std::fs::write(
        &config,
        format!(
            "[probe]\ninterval_seconds = 1\ntimeout_seconds = 2\n\n[[probe.servers]]\nname = \"live-mcp\"\nurl = \"{endpoint}\"\n\
             headers = {{ \"X-Probe\" = \"driftline\" }}\n"
        ),
    )
    .expect("config");
    let server = Server::start(&dir, Some(&config), &[]);
    let client = server.client(None);

    // All three pages: five tools, UP, with a measured latency.
    let health = client.wait_for("/api/health/servers/live-mcp", "the first probe", |s| s["status"] == "UP");
    assert_eq!(health["tool_count"], 5);
    assert!(health["latency_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{health}");
    let tools = client.get("/api/servers/live-mcp/tools").1;
    assert_eq!(tools.as_array().map(Vec::len), Some(5));

    // The server's tool list changes between probes: a required parameter appears.
    if let Ok(mut tools) = catalog.tools.lock() {
        tools[3] = tool("tool_3", &["q", "region"]);
    }
    client.wait_for("/api/health/servers/live-mcp", "the drift", |s| s["status"] == "DEGRADED");
    let history = client.get("/api/health/servers/live-mcp/drift-history").1;
    let change = &history[0]["changes"][0];
    assert_eq!(
        (change["change_type"].as_str(), change["tool_name"].as_str()),
        (Some("param_became_required"), Some("tool_3"))
    );
    assert_eq!(history.as_array().map(Vec::len), Some(1), "repeated probes of one change make one event");

    // The server stops answering within the timeout: DOWN with the reason; then it recovers.
    catalog.slow.store(true, Ordering::SeqCst);
    let down = client.wait_for("/api/health/servers/live-mcp", "DOWN", |s| s["status"] == "DOWN");
    assert!(down["note"].as_str().is_some_and(|n| n.contains("timed out")), "{down}");
    catalog.slow.store(false, Ordering::SeqCst);
    client.wait_for("/api/health/servers/live-mcp", "recovery", |s| s["status"] != "DOWN");
    let metrics = client.get("/metrics").1;
    let metrics = metrics.as_str().unwrap_or_default();
    assert!(metrics.contains("driftline_probes_total{result=\"down\"}"), "{metrics}");
}

#[test]
fn an_unreachable_server_is_down_from_the_start() {
    let dir = temp_dir("probe-unreachable");
    let config = dir.join("driftline.toml");
    std::fs::write(
        &config,
        "[probe]\ninterval_seconds = 1\ntimeout_seconds = 1\n\n[[probe.servers]]\nname = \"gone\"\nurl = \"http://127.0.0.1:9/mcp\"\n",
    )
    .expect("config");
    let server = Server::start(&dir, Some(&config), &[]);
    let health = server.client(None).wait_for("/api/health/servers/gone", "DOWN", |s| s["status"] == "DOWN");
    assert!(health["note"].as_str().is_some_and(|n| !n.is_empty()), "{health}");
    assert_eq!(health["tool_count"], 0);
}

/// A `[[probe.servers]]` entry that starts the catalog server over stdio with its state in `state`.
fn stdio_entry(name: &str, state: &std::path::Path) -> String {
    format!(
        "[[probe.servers]]\nname = \"{name}\"\ncommand = {:?}\nargs = [{:?}, \"--state\", {:?}]\n",
        python().display().to_string(),
        catalog_server().display().to_string(),
        state.display().to_string()
    )
}

#[test]
fn a_stdio_server_is_probed_restarted_when_it_exits_and_its_new_tools_seen() {
    let state = temp_dir("stdio-state");
    let dir = temp_dir("probe-stdio");
    let config = dir.join("driftline.toml");
    std::fs::write(
        &config,
        format!("[probe]\ninterval_seconds = 1\ntimeout_seconds = 15\n\n{}", stdio_entry("catalog", &state)),
    )
    .expect("config");
    let server = Server::start(&dir, Some(&config), &[]);
    let client = server.client(None);

    let health =
        client.wait_for_within(30, "/api/health/servers/catalog", "the first probe", |s| s["status"] == "UP");
    assert_eq!(health["tool_count"], 2, "{health}");
    let first = catalog_pid(&state);
    // The child's stderr reaches driftline's log, never its stdout.
    wait_until(10, "the server's stderr in driftline's log", || {
        let log = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
        log.contains("catalog server starting with tools v1").then_some(()).ok_or_else(|| "not yet".into())
    });

    // The server exits and cannot start again: DOWN, and it stays DOWN while restarts fail.
    std::fs::write(state.join("version"), "2").expect("version");
    std::fs::write(state.join("fail"), "").expect("fail");
    std::fs::remove_file(state.join("pid")).expect("pid file");
    let _ = std::process::Command::new("kill").arg("-9").arg(first.to_string()).status();
    let down = client.wait_for_within(30, "/api/health/servers/catalog", "DOWN", |s| s["status"] == "DOWN");
    assert!(down["note"].as_str().is_some_and(|n| !n.is_empty()), "{down}");
    wait_until(10, "the killed server to be reaped", || {
        (!process_exists(first)).then_some(()).ok_or_else(|| format!("pid {first} still exists"))
    });

    // It starts again (with its new tools): the restart is seen as drift of the tool list.
    std::fs::remove_file(state.join("fail")).expect("fail file");
    client.wait_for_within(40, "/api/health/servers/catalog", "the restart", |s| s["status"] == "DEGRADED");
    assert_ne!(catalog_pid(&state), first, "a new child process");
    let history = client.get("/api/health/servers/catalog/drift-history").1;
    let change = &history[0]["changes"][0];
    assert_eq!(
        (change["change_type"].as_str(), change["tool_name"].as_str(), change["param_name"].as_str()),
        (Some("param_became_required"), Some("search"), Some("region")),
        "{history}"
    );

    // On shutdown the child is stopped with driftline.
    let child = catalog_pid(&state);
    assert!(server.terminate().success());
    wait_until(10, "the child to exit with driftline", || {
        (!process_exists(child)).then_some(()).ok_or_else(|| format!("pid {child} still exists"))
    });
}

#[test]
fn a_stdio_server_that_does_not_answer_is_down_and_killed() {
    let state = temp_dir("hang-state");
    std::fs::write(state.join("hang"), "").expect("hang");
    let dir = temp_dir("probe-hang");
    let config = dir.join("driftline.toml");
    std::fs::write(
        &config,
        format!("[probe]\ninterval_seconds = 60\ntimeout_seconds = 3\n\n{}", stdio_entry("silent", &state)),
    )
    .expect("config");
    let server = Server::start(&dir, Some(&config), &[]);
    let pid = catalog_pid(&state);
    let down = server
        .client(None)
        .wait_for_within(30, "/api/health/servers/silent", "DOWN", |s| s["status"] == "DOWN");
    assert!(down["note"].as_str().is_some_and(|n| n.contains("timed out")), "{down}");
    wait_until(10, "the silent child to be killed and reaped", || {
        (!process_exists(pid)).then_some(()).ok_or_else(|| format!("pid {pid} still exists"))
    });
}

#[test]
fn sse_and_streamable_http_servers_on_the_python_sdk_are_probed() {
    let state = temp_dir("http-state");
    let (mut sse, sse_url) = catalog_over_http("sse", &state);
    let (mut http, http_url) = catalog_over_http("streamable-http", &state);
    let dir = temp_dir("probe-python-http");
    let config = dir.join("driftline.toml");
    std::fs::write(
        &config,
        format!(
            "[probe]\ninterval_seconds = 1\ntimeout_seconds = 10\n\n\
             [[probe.servers]]\nname = \"legacy\"\nurl = \"{sse_url}\"\ntransport = \"sse\"\n\n\
             [[probe.servers]]\nname = \"modern\"\nurl = \"{http_url}\"\n"
        ),
    )
    .expect("config");
    let server = Server::start(&dir, Some(&config), &[]);
    let client = server.client(None);
    for name in ["legacy", "modern"] {
        let path = format!("/api/health/servers/{name}");
        let health = client.wait_for_within(30, &path, "the first probe", |s| s["status"] == "UP");
        assert_eq!(health["tool_count"], 2, "{health}");
    }
    let _ = sse.kill();
    let _ = sse.wait();
    client.wait_for_within(30, "/api/health/servers/legacy", "DOWN", |s| s["status"] == "DOWN");
    let _ = http.kill();
    let _ = http.wait();
}

#[test]
fn capture_prints_every_tool_of_a_server_over_each_transport() {
    let catalog = Catalog {
        tools: Arc::new(Mutex::new((0..5).map(|i| tool(&format!("tool_{i}"), &["q"])).collect())),
        slow: Arc::new(AtomicBool::new(false)),
    };
    let served = Arc::clone(&catalog.tools);
    let endpoint = serve_mcp(catalog);
    let dir = temp_dir("capture");
    let out = dir.join("tools.json");
    let out_arg = out.display().to_string();

    // Streamable HTTP, three pages, to a file; a header is accepted.
    let (code, stdout, stderr) =
        run_cli(&["capture", "--url", &endpoint, "--header", "X-Probe=driftline", "--out", &out_arg]);
    assert_eq!((code, stdout.as_str()), (0, ""), "{stderr}");
    let tools: Value = serde_json::from_str(&std::fs::read_to_string(&out).expect("out file")).expect("JSON");
    let names: Vec<&str> =
        tools.as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["tool_0", "tool_1", "tool_2", "tool_3", "tool_4"]);

    // Capture and diff in one command, against the live server: unchanged, then a release that makes
    // `region` required, reported as SARIF pointing into the list it kept.
    let (code, report, stderr) = run_cli(&["diff", "--url", &endpoint, &out_arg, "--fail-on", "breaking"]);
    assert_eq!(code, 0, "{report}{stderr}");
    assert!(report.starts_with("No drift"), "{report}");
    if let Ok(mut tools) = served.lock() {
        tools[3] = tool("tool_3", &["q", "region"]);
    }
    let kept = dir.join("current-http.json").display().to_string();
    let (code, sarif, stderr) = run_cli(&[
        "diff",
        "--url",
        &endpoint,
        &out_arg,
        "--fail-on",
        "breaking",
        "--format",
        "sarif",
        "--out",
        &kept,
    ]);
    assert_eq!(code, 1, "{sarif}{stderr}");
    let sarif: Value = serde_json::from_str(&sarif).expect("a SARIF log");
    let result = &sarif["runs"][0]["results"][0];
    assert_eq!(
        (&result["ruleId"], &result["level"]),
        (&json!("param_became_required"), &json!("error")),
        "{sarif}"
    );
    let location = &result["locations"][0]["physicalLocation"];
    assert!(
        location["artifactLocation"]["uri"].as_str().is_some_and(|uri| uri.ends_with("current-http.json")),
        "{location}"
    );
    let line = std::fs::read_to_string(&kept)
        .expect("the kept list")
        .lines()
        .position(|l| l.contains("\"tool_3\""))
        .map(|i| i + 1);
    assert_eq!(location["region"]["startLine"].as_u64(), line.map(|l| l as u64), "{location}");
    let (code, _, stderr) = run_cli(&["diff", "--url", "http://127.0.0.1:9/mcp", &out_arg, "--timeout", "3"]);
    assert_eq!(code, 3, "unreachable: {stderr}");
    let (code, _, stderr) = run_cli(&["diff", "--url", &endpoint, &out_arg, &out_arg]);
    assert_eq!(code, 2, "a file and --url: {stderr}");

    // stdio, to stdout, keys in a stable (sorted) order; the result diffs cleanly against itself.
    let state = temp_dir("capture-state");
    let python = python().display().to_string();
    let script = catalog_server().display().to_string();
    let state_arg = state.display().to_string();
    let capture_stdio = || run_cli(&["capture", "--", &python, &script, "--state", &state_arg]);
    let (code, stdout, stderr) = capture_stdio();
    assert_eq!(code, 0, "{stderr}");
    let tools: Value = serde_json::from_str(&stdout).expect("a JSON tools array");
    assert_eq!(tools[0]["name"], "search", "{stdout}");
    let first_keys: Vec<&String> = tools[0].as_object().map(|o| o.keys().collect()).unwrap_or_default();
    let mut sorted = first_keys.clone();
    sorted.sort();
    assert_eq!(first_keys, sorted, "keys in stable order");
    let baseline = dir.join("baseline.json");
    std::fs::write(&baseline, &stdout).expect("baseline");
    let baseline_arg = baseline.display().to_string();

    // The CI gate: a new release of the server makes a parameter required.
    std::fs::write(state.join("version"), "2").expect("version");
    let (code, current, stderr) = capture_stdio();
    assert_eq!(code, 0, "{stderr}");
    let current_path = dir.join("current.json");
    std::fs::write(&current_path, &current).expect("current");
    let current_arg = current_path.display().to_string();
    let (code, report, _) = run_cli(&["diff", &baseline_arg, &baseline_arg, "--fail-on", "breaking"]);
    assert_eq!(code, 0, "{report}");
    let (code, report, _) = run_cli(&["diff", &baseline_arg, &current_arg, "--fail-on", "breaking"]);
    assert_eq!(code, 1, "{report}");
    assert!(report.contains("region"), "{report}");

    // Unreachable (3), a command that does not exist (3), usage (2).
    let (code, _, stderr) = run_cli(&["capture", "--url", "http://127.0.0.1:9/mcp", "--timeout", "3"]);
    assert_eq!(code, 3, "{stderr}");
    let (code, _, stderr) = run_cli(&["capture", "--", "/nonexistent/mcp-server"]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("/nonexistent/mcp-server"), "{stderr}");
    for usage in [
        &["capture"][..],
        &["capture", "--url", &endpoint, "--", "ls"],
        &["capture", "--header", "x", "--url", &endpoint],
    ] {
        let (code, _, stderr) = run_cli(usage);
        assert_eq!(code, 2, "{usage:?}: {stderr}");
    }
}

#[test]
fn drift_and_down_up_reach_webhooks_once_signed_after_a_failed_attempt() {
    let catalog = Catalog {
        tools: Arc::new(Mutex::new((0..3).map(|i| tool(&format!("tool_{i}"), &["q"])).collect())),
        slow: Arc::new(AtomicBool::new(false)),
    };
    let endpoint = serve_mcp(catalog.clone());
    // The JSON receiver fails its first request: the notification is retried.
    let json = WebhookReceiver::start(1);
    let slack = WebhookReceiver::start(0);
    let dir = temp_dir("notify");
    let config = dir.join("driftline.toml");
    std::fs::write(
        &config,
        format!(
            "[probe]\ninterval_seconds = 1\ntimeout_seconds = 2\n\n\
             [[probe.servers]]\nname = \"live-mcp\"\nurl = \"{endpoint}\"\n\n\
             [notify]\npublic_url = \"https://driftline.example\"\n\n\
             [[notify.webhooks]]\nurl = \"{}\"\nsecret = \"s3cret\"\n\n\
             [[notify.webhooks]]\nurl = \"{}\"\nformat = \"slack\"\nmin_classification = \"breaking\"\nprojects = [\"default\"]\n",
            json.url, slack.url
        ),
    )
    .expect("config");
    let mut server = Server::start(&dir, Some(&config), &[]);
    let client = server.client(None);
    client.wait_for("/api/health/servers/live-mcp", "the baseline", |s| s["status"] == "UP");
    // An agent calls tool_1 with `q` only: the change below makes `region` required, which its calls lack.
    let calls: Vec<Value> = (0..3)
        .map(|i| json!({"span_id": format!("c{i}"), "agent_name": "planner", "server": "live-mcp", "tool": "tool_1",
            "started_at": support::recent(), "duration_ms": 5, "status": "success", "arguments": {"q": "x"}}))
        .collect();
    assert_eq!(client.post_json("/v1/spans", &Value::Array(calls)).0, 202);
    client.wait_for("/api/health/servers/live-mcp/drift-impact?tool_name=tool_1", "3 calls", |impact| {
        impact["consumers"][0]["call_count"] == 3
    });

    // A breaking change: both receivers hear of it, the JSON one after its 500.
    if let Ok(mut tools) = catalog.tools.lock() {
        tools[1] = tool("tool_1", &["q", "region"]);
    }
    let drift =
        json.wait_for(20, "the drift notification", |r| r.header("x-driftline-event") == Some("drift"));
    assert_eq!(
        drift.header("x-driftline-signature"),
        Some(webhook_signature("s3cret", &drift.body).as_str())
    );
    let body = drift.json();
    assert_eq!(
        (body["server_name"].as_str(), body["classification"].as_str()),
        (Some("live-mcp"), Some("BREAKING")),
        "{body}"
    );
    assert_eq!(body["counts"]["breaking"], 1, "{body}");
    assert_eq!(body["top_changes"][0]["change_type"], "param_became_required", "{body}");
    assert_eq!(
        body["affected_agents"],
        json!(["tool_1: planner — 3 of 3 calls would be rejected — region: required by the declared schema, missing"]),
        "{body}"
    );
    assert_eq!(body["dashboard_url"], "https://driftline.example/#/servers/live-mcp/drift", "{body}");
    let history = client.get("/api/health/servers/live-mcp/drift-history").1;
    assert_eq!(body["event_id"], history[0]["id"], "the notification names the event");
    let first = &json.received()[0];
    assert_eq!(
        (first.status, first.header("x-driftline-delivery")),
        (500, drift.header("x-driftline-delivery")),
        "retried after the 500"
    );
    let message =
        slack.wait_for(20, "the Slack message", |r| r.header("x-driftline-event") == Some("drift")).json();
    assert_eq!(message["text"], "BREAKING tool-list drift on live-mcp", "{message}");
    assert!(message["blocks"].as_array().is_some_and(|b| b.len() >= 3), "{message}");
    assert_eq!(slack.received()[0].header("x-driftline-signature"), None, "no secret, no signature");

    // DOWN, then UP again: one notification each.
    catalog.slow.store(true, Ordering::SeqCst);
    let down = json.wait_for(20, "DOWN", |r| r.header("x-driftline-event") == Some("down")).json();
    assert!(down["note"].as_str().is_some_and(|n| n.contains("timed out")), "{down}");
    catalog.slow.store(false, Ordering::SeqCst);
    let up = json.wait_for(20, "UP", |r| r.header("x-driftline-event") == Some("up")).json();
    assert_eq!(up["note"], "3 tools", "{up}");

    // kill -9 and restart: nothing is sent again; the next transition still is.
    server.crash_and_restart();
    let client = server.client(None);
    catalog.slow.store(true, Ordering::SeqCst);
    client.wait_for("/api/health/servers/live-mcp", "DOWN after the restart", |s| s["status"] == "DOWN");
    json.wait_for(20, "the second DOWN", |r| {
        r.header("x-driftline-event") == Some("down")
            && r.header("x-driftline-delivery") != down["id"].as_str()
    });
    catalog.slow.store(false, Ordering::SeqCst);
    let delivered: Vec<String> = json
        .received()
        .iter()
        .filter(|r| r.status == 200)
        .filter_map(|r| r.header("x-driftline-delivery").map(str::to_owned))
        .collect();
    let mut unique = delivered.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(delivered.len(), unique.len(), "each notification delivered once: {delivered:?}");
    assert_eq!(delivered.len(), 4, "drift, DOWN, UP, DOWN: {delivered:?}");
    let metrics = client.get("/metrics").1;
    let metrics = metrics.as_str().unwrap_or_default();
    assert!(metrics.contains("driftline_notifications_total{result=\"sent\""), "{metrics}");
}

/// The reference server of the MCP project, from npm (`make mcp-servers`), probed over stdio as a user
/// configures it.
#[test]
fn the_npm_reference_server_is_probed_over_stdio() {
    let bin = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(bin.exists(), "{} is missing: run `make mcp-servers` (make test does)", bin.display());
    let dir = temp_dir("probe-everything");
    let config = dir.join("driftline.toml");
    std::fs::write(
        &config,
        format!(
            "[probe]\ninterval_seconds = 5\ntimeout_seconds = 30\n\n\
             [[probe.servers]]\nname = \"everything\"\ncommand = \"node\"\nargs = [{:?}]\n",
            bin.display().to_string()
        ),
    )
    .expect("config");
    let server = Server::start(&dir, Some(&config), &[]);
    let client = server.client(None);
    let health = client
        .wait_for_within(60, "/api/health/servers/everything", "the first probe", |s| s["status"] == "UP");
    assert!(health["tool_count"].as_u64().is_some_and(|n| n >= 10), "{health}");
    let tools = client.get("/api/servers/everything/tools").1;
    let names: Vec<&str> =
        tools.as_array().into_iter().flatten().filter_map(|t| t["tool_name"].as_str()).collect();
    assert!(names.contains(&"echo") && names.contains(&"get-sum"), "{names:?}");
    // What it declares besides its tools, captured over stdio: its prompts, resources and templates
    // (and instructions, where it gives them), in the object form `driftline diff` reads.
    let (code, out, stderr) = run_cli(&["capture", "--", "node", &bin.display().to_string()]);
    assert_eq!(code, 0, "{stderr}");
    let captured: Value = serde_json::from_str(&out).expect("capture prints JSON");
    let count = |key: &str| captured[key].as_array().map_or(0, Vec::len);
    assert!(count("tools") >= 10, "{captured}");
    assert!(count("prompts") >= 1 && count("resources") >= 1, "prompts and resources captured: {out}");
    let prompt_names: Vec<&str> =
        captured["prompts"].as_array().into_iter().flatten().filter_map(|p| p["name"].as_str()).collect();
    assert!(!prompt_names.is_empty(), "{prompt_names:?}");
    // The capture diffs against itself as no change, and against its tools alone as no change either
    // (a file of tools only says nothing of the rest).
    let dir = temp_dir("everything-capture");
    let (full, tools_only) = (dir.join("full.json"), dir.join("tools.json"));
    std::fs::write(&full, &out).expect("write");
    std::fs::write(&tools_only, captured["tools"].to_string()).expect("write");
    for other in [&full, &tools_only] {
        let (code, out, _) = run_cli(&[
            "diff",
            &full.display().to_string(),
            &other.display().to_string(),
            "--fail-on",
            "compatible",
        ]);
        assert_eq!(code, 0, "{out}");
    }
    // A prompt gone: BREAKING.
    let mut fewer = captured.clone();
    if let Some(prompts) = fewer["prompts"].as_array_mut() {
        prompts.remove(0);
    }
    let changed = dir.join("changed.json");
    std::fs::write(&changed, fewer.to_string()).expect("write");
    let (code, out, _) = run_cli(&[
        "diff",
        &full.display().to_string(),
        &changed.display().to_string(),
        "--fail-on",
        "breaking",
        "--format",
        "json",
    ]);
    assert_eq!(code, 1, "{out}");
    let report: Value = serde_json::from_str(&out).expect("a JSON report");
    assert_eq!(report["changes"][0]["change_type"], "prompt_removed", "{report}");
    assert_eq!(report["changes"][0]["tool_name"], prompt_names[0], "{report}");
}

/// A server that speaks only MCP 2026-07-28 (the official Python SDK with the `initialize` era refused:
/// `server/discover` and per-request `_meta` only) is captured and probed over stdio and Streamable HTTP,
/// its instructions, prompt and resource with its tools.
#[test]
fn a_server_that_speaks_only_2026_07_28_is_probed_and_captured() {
    let state = temp_dir("modern-only-state");
    for flag in ["modern-only", "surfaces"] {
        std::fs::write(state.join(flag), "").expect("state");
    }
    let (python, script) = (python().display().to_string(), catalog_server().display().to_string());
    let state_arg = state.display().to_string();
    let (code, out, stderr) = run_cli(&["capture", "--", &python, &script, "--state", &state_arg]);
    assert_eq!(code, 0, "{stderr}");
    let captured: Value = serde_json::from_str(&out).expect("capture prints JSON");
    let names = |key: &str, field: &str| -> Vec<String> {
        captured[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e[field].as_str().map(String::from))
            .collect()
    };
    let mut tools = names("tools", "name");
    tools.sort();
    assert_eq!(tools, ["get_page", "search"], "{out}");
    assert_eq!(names("prompts", "name"), ["review"], "{out}");
    assert_eq!(names("resources", "uri"), ["catalog://about"], "{out}");
    assert_eq!(captured["instructions"], "Search the catalog before fetching a page.", "{out}");

    // Over Streamable HTTP, probed by `serve`: UP with both tools.
    let (mut child, endpoint) = support::catalog_over_http("streamable-http", &state);
    let dir = temp_dir("modern-only");
    let config = dir.join("driftline.toml");
    std::fs::write(
        &config,
        format!("[probe]\ninterval_seconds = 30\ntimeout_seconds = 20\n\n[[probe.servers]]\nname = \"modern\"\nurl = \"{endpoint}\"\n"),
    )
    .expect("config");
    let server = Server::start(&dir, Some(&config), &[]);
    let client = server.client(None);
    let health =
        client.wait_for_within(40, "/api/health/servers/modern", "the first probe", |s| s["status"] == "UP");
    assert_eq!(health["tool_count"], 2, "{health}");
    let _ = child.kill();
    let _ = child.wait();
}

/// On a 2026-07-28 session a server's list changes reach the prober on its `subscriptions/listen` stream
/// and trigger a probe at once: with a 300 s interval, a new release of a tool shows within seconds.
#[test]
fn a_list_change_on_the_2026_07_28_subscription_stream_triggers_a_probe() {
    check_list_change_triggers_a_probe("listen", &["modern-only", "watch"]);
}

/// On a 2025-11-25 session (a server refusing 2026-07-28 is spoken to with `initialize`) the same change
/// arrives as `notifications/tools/list_changed` and triggers a probe at once too.
#[test]
fn a_tools_list_changed_notification_on_a_2025_11_25_session_triggers_a_probe() {
    check_list_change_triggers_a_probe("notified", &["legacy-only", "watch"]);
}

fn check_list_change_triggers_a_probe(name: &str, flags: &[&str]) {
    let state = temp_dir(&format!("{name}-state"));
    for flag in flags {
        std::fs::write(state.join(flag), "").expect("state");
    }
    let dir = temp_dir(name);
    let config = dir.join("driftline.toml");
    std::fs::write(
        &config,
        format!(
            "[probe]\ninterval_seconds = 300\ntimeout_seconds = 20\n\n[[probe.servers]]\nname = \"live\"\ncommand = {:?}\nargs = [{:?}, \"--state\", {:?}]\n",
            python().display().to_string(),
            catalog_server().display().to_string(),
            state.display().to_string()
        ),
    )
    .expect("config");
    let server = Server::start(&dir, Some(&config), &[]);
    let client = server.client(None);
    client.wait_for_within(40, "/api/health/servers/live", "the first probe", |s| s["status"] == "UP");
    std::fs::write(state.join("version"), "2").expect("version");
    let health =
        client.wait_for_within(20, "/api/health/servers/live", "the change, before the interval", |s| {
            s["status"] == "DEGRADED"
        });
    let history = client.get("/api/health/servers/live/drift-history").1;
    assert_eq!(history[0]["changes"][0]["change_type"], "param_became_required", "{health} {history}");
}

/// One step of action.yml as the runner reads it: its `run:` line (bash steps) or the action it `uses:`,
/// its `if:` and its `env:`.
#[derive(Debug, Default)]
struct ActionStep {
    name: String,
    run: Option<String>,
    uses: Option<String>,
    condition: Option<String>,
    env: Vec<(String, String)>,
}

/// The steps of a composite action file, read line by line (the file keeps each value on its key's line).
fn action_steps(text: &str) -> Vec<ActionStep> {
    let mut steps: Vec<ActionStep> = Vec::new();
    let mut in_env = false;
    for line in text.lines().skip_while(|line| line.trim() != "steps:").skip(1) {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix("- name: ") {
            steps.push(ActionStep { name: name.to_owned(), ..ActionStep::default() });
            in_env = false;
            continue;
        }
        let Some(step) = steps.last_mut() else { continue };
        let indent = line.len() - line.trim_start().len();
        if in_env && indent == 8 {
            if let Some((key, value)) = trimmed.split_once(": ") {
                step.env.push((key.to_owned(), value.to_owned()));
            }
            continue;
        }
        in_env = trimmed == "env:";
        match trimmed.split_once(": ") {
            Some(("run", run)) => {
                // A value opening with a quote would be a YAML quoted scalar ending at its closing quote.
                assert!(!run.starts_with(['"', '\'']), "step {:?}: run: {run}", step.name);
                step.run = Some(run.to_owned());
            }
            Some(("uses", uses)) => step.uses = Some(uses.to_owned()),
            Some(("if", condition)) => step.condition = Some(condition.to_owned()),
            _ => {}
        }
    }
    steps
}

/// `${{ inputs.X }}` and `${{ steps.check.outputs.X }}` put in, as the runner does before a step runs.
fn expressions(text: &str, inputs: &[(&str, String)], outputs: &[(String, String)]) -> String {
    let mut out = text.to_owned();
    for (name, value) in inputs {
        out = out.replace(&format!("${{{{ inputs.{name} }}}}"), value);
    }
    for (name, value) in outputs {
        out = out.replace(&format!("${{{{ steps.check.outputs.{name} }}}}"), value);
    }
    out
}

/// The GitHub Action of this repository (action.yml), its bash steps run as the runner runs them — each
/// `run:` line through `bash -eo pipefail` with the step's `env:`, inputs and outputs put in, the runner's
/// files (`GITHUB_OUTPUT`, `GITHUB_STEP_SUMMARY`, `GITHUB_PATH`) — against a stdio server on the official
/// Python SDK: a release that makes a parameter required is annotated, its SARIF and summary written, and
/// the last step fails; the unchanged server passes. The upload step is GitHub's own action: only its
/// condition and input are checked here.
#[test]
fn the_github_actions_steps_annotate_and_fail_a_breaking_release() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let steps = action_steps(&std::fs::read_to_string(root.join("action.yml")).expect("action.yml"));
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["Install driftline", "Capture and diff", "Upload SARIF", "Fail per fail-on"]);
    let upload = &steps[2];
    assert_eq!(upload.uses.as_deref(), Some("github/codeql-action/upload-sarif@v3"));
    assert!(
        upload.condition.as_deref().is_some_and(|c| c.contains("steps.check.outputs.sarif")),
        "{upload:?}"
    );

    let dir = temp_dir("action");
    let state = temp_dir("action-state");
    let command =
        format!("{} {} --state {}", python().display(), catalog_server().display(), state.display());
    let baseline = dir.join("mcp-baseline.json");
    let mut capture = vec!["capture", "--out"];
    let baseline_arg = baseline.display().to_string();
    capture.push(&baseline_arg);
    capture.push("--");
    capture.extend(command.split(' '));
    let (code, _, stderr) = run_cli(&capture);
    assert_eq!(code, 0, "{stderr}");

    let run = |version: &str| -> (Vec<i32>, String, Vec<(String, String)>, String) {
        std::fs::write(state.join("version"), version).expect("version");
        let runner = temp_dir(&format!("action-runner-{version}"));
        let (output, summary, path) = (runner.join("output"), runner.join("summary.md"), runner.join("path"));
        for file in [&output, &summary, &path] {
            std::fs::write(file, "").expect("a runner file");
        }
        let inputs = [
            ("baseline", baseline_arg.clone()),
            ("command", command.clone()),
            ("url", String::new()),
            ("fail-on", "breaking".to_owned()),
            ("ignore", String::new()),
            ("server", String::new()),
            ("context-growth-percent", "0".to_owned()),
        ];
        let (mut codes, mut annotations, mut outputs) = (Vec::new(), String::new(), Vec::new());
        for step in steps.iter().filter(|s| s.run.is_some()) {
            let script = expressions(step.run.as_deref().unwrap_or_default(), &inputs, &outputs);
            let extra_path = std::fs::read_to_string(&path).unwrap_or_default();
            let search =
                extra_path.lines().chain(std::env::var("PATH").ok().as_deref()).collect::<Vec<_>>().join(":");
            let result = std::process::Command::new("bash")
                .args(["--noprofile", "--norc", "-eo", "pipefail", "-c", &script])
                .envs(step.env.iter().map(|(k, v)| (k.clone(), expressions(v, &inputs, &outputs))))
                .env("GITHUB_ACTION_PATH", root)
                .env("RUNNER_TEMP", &runner)
                .env("GITHUB_OUTPUT", &output)
                .env("GITHUB_STEP_SUMMARY", &summary)
                .env("GITHUB_PATH", &path)
                .env("DRIFTLINE_BIN", env!("CARGO_BIN_EXE_driftline"))
                .env("PATH", search)
                .output()
                .expect("bash");
            codes.push(result.status.code().unwrap_or(-1));
            annotations.push_str(&String::from_utf8_lossy(&result.stdout));
            outputs = std::fs::read_to_string(&output)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
                .collect();
        }
        (codes, annotations, outputs, std::fs::read_to_string(&summary).unwrap_or_default())
    };

    let (codes, annotations, outputs, summary) = run("2");
    assert_eq!(codes, [0, 0, 1], "install, check, fail: {annotations}");
    assert!(annotations.contains("::error file=") && annotations.contains("region"), "{annotations}");
    let output = |name: &str| outputs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    assert_eq!(output("exit-code").as_deref(), Some("1"));
    let sarif: Value = serde_json::from_str(
        &std::fs::read_to_string(output("sarif").expect("a sarif output")).expect("the log"),
    )
    .expect("SARIF JSON");
    assert_eq!(sarif["runs"][0]["results"][0]["level"], "error", "{sarif}");
    assert!(summary.starts_with("### driftline: ") && summary.contains("BREAKING"), "{summary}");

    let (codes, annotations, outputs, _) = run("1");
    assert_eq!(codes, [0, 0, 0], "the unchanged server passes: {annotations}");
    assert!(outputs.iter().any(|(k, v)| k == "exit-code" && v == "0"), "{outputs:?}");
}
