//! Active probing against a real MCP server built with rmcp inside the test: pagination, a tool list
//! that changes between probes, and a server that stops answering in time and then recovers.

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
use support::{temp_dir, Server};

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
