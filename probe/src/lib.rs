//! Active MCP probing (DESIGN.md §5 "DOWN"): for each configured server, connect over Streamable HTTP with
//! the official Rust SDK (rmcp), follow every `tools/list` cursor, and publish the complete list as a
//! ToolListSnapshot (source `probe`, with the round-trip latency), or a ProbeFailure when the server cannot
//! be reached in time. The session stays open between probes so that `notifications/tools/list_changed`
//! triggers a probe at once; any failure drops it and the next probe reconnects.

mod metrics;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use driftline_bus::{Message, Producer, Topic};
use driftline_schemas::{ProbeFailure, SnapshotSource, Timestamp, ToolListSnapshot};
use rmcp::model::{ClientConfig, PaginatedRequestParams};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{watch, Notify};

/// One MCP server to probe.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeTarget {
    /// The server name driftline files the results under.
    pub name: String,
    /// Streamable HTTP endpoint, e.g. `http://127.0.0.1:9000/mcp`.
    pub url: String,
    /// Extra request headers, e.g. `{ Authorization = "Bearer …" }`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// The project probe results belong to.
    pub project: String,
    pub interval: Duration,
    /// Connecting, and each full `tools/list`, must finish within this.
    pub timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("invalid header {0:?} for {1}")]
    Header(String, String),
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("tools/list failed: {0}")]
    List(String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("tools/list returned the cursor {0:?} twice")]
    CursorLoop(String),
}

/// Client side of a session: only listens for tool-list changes.
#[derive(Clone)]
struct Listener {
    changed: Arc<Notify>,
}

impl ClientHandler for Listener {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        let changed = self.changed.clone();
        async move {
            tracing::debug!("tools/list_changed received");
            changed.notify_one();
        }
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }
}

type Session = RunningService<RoleClient, Listener>;

async fn connect(target: &ProbeTarget, changed: Arc<Notify>) -> Result<Session, ProbeError> {
    let mut headers = HashMap::new();
    for (name, value) in &target.headers {
        let header = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| ProbeError::Header(name.clone(), target.name.clone()))?;
        let value = http::HeaderValue::from_str(value)
            .map_err(|_| ProbeError::Header(name.clone(), target.name.clone()))?;
        headers.insert(header, value);
    }
    let config = StreamableHttpClientTransportConfig::with_uri(target.url.as_str()).custom_headers(headers);
    let transport = StreamableHttpClientTransport::from_config(config);
    Listener { changed }.serve(transport).await.map_err(|err| ProbeError::Connect(err.to_string()))
}

/// Every tool the server declares, following `nextCursor` until it stops.
async fn list_all(session: &Session) -> Result<Vec<Value>, ProbeError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen = HashSet::new();
    loop {
        let params = PaginatedRequestParams::default().with_cursor(cursor.clone());
        let page = session.list_tools(Some(params)).await.map_err(|err| ProbeError::List(err.to_string()))?;
        for tool in page.tools {
            tools.push(serde_json::to_value(tool).map_err(|err| ProbeError::List(err.to_string()))?);
        }
        match page.next_cursor {
            Some(next) if !next.is_empty() => {
                if !seen.insert(next.clone()) {
                    return Err(ProbeError::CursorLoop(next));
                }
                cursor = Some(next);
            }
            _ => return Ok(tools),
        }
    }
}

async fn within<T>(
    limit: Duration,
    work: impl Future<Output = Result<T, ProbeError>>,
) -> Result<T, ProbeError> {
    tokio::time::timeout(limit, work).await.unwrap_or(Err(ProbeError::Timeout(limit)))
}

fn now() -> Timestamp {
    Timestamp::from(chrono::Utc::now())
}

async fn publish(producer: &dyn Producer, key: String, payload: Result<Vec<u8>, serde_json::Error>) {
    let payload = match payload {
        Ok(payload) => payload,
        Err(err) => {
            tracing::error!(error = %err, "probe result cannot be encoded");
            return;
        }
    };
    if let Err(err) = producer.publish(vec![Message { topic: Topic::ToolLists, key, payload }]).await {
        tracing::warn!(error = %err, "probe result not published; the next probe tries again");
    }
}

/// Probes one server until `shutdown` turns true.
pub async fn run(
    target: ProbeTarget,
    settings: ProbeSettings,
    producer: Arc<dyn Producer>,
    mut shutdown: watch::Receiver<bool>,
) {
    let changed = Arc::new(Notify::new());
    let key = format!("{}/{}", settings.project, target.name);
    let mut session: Option<Session> = None;
    while !*shutdown.borrow() {
        let started = Instant::now();
        let result = async {
            if session.is_none() {
                session = Some(within(settings.timeout, connect(&target, changed.clone())).await?);
            }
            match &session {
                Some(open) => within(settings.timeout, list_all(open)).await,
                None => Err(ProbeError::Connect("no session".into())),
            }
        }
        .await;
        let latency_ms = started.elapsed().as_secs_f64() * 1e3;
        match result {
            Ok(tools) => {
                metrics::PROBES.with_label_values(&["up"]).inc();
                tracing::debug!(server = %target.name, tools = tools.len(), latency_ms, "probe succeeded");
                let snapshot = ToolListSnapshot {
                    schema_version: driftline_schemas::SCHEMA_VERSION,
                    project: settings.project.clone(),
                    server: target.name.clone(),
                    captured_at: now(),
                    source: SnapshotSource::Probe,
                    latency_ms: Some(latency_ms),
                    tools,
                };
                publish(producer.as_ref(), key.clone(), serde_json::to_vec(&snapshot)).await;
            }
            Err(err) => {
                metrics::PROBES.with_label_values(&["down"]).inc();
                tracing::info!(server = %target.name, error = %err, "probe failed");
                // Drop the session: the next probe starts with a fresh initialize.
                if let Some(open) = session.take() {
                    let _ = tokio::time::timeout(Duration::from_secs(1), open.cancel()).await;
                }
                let failure = ProbeFailure {
                    schema_version: driftline_schemas::SCHEMA_VERSION,
                    project: settings.project.clone(),
                    server: target.name.clone(),
                    probed_at: now(),
                    error: err.to_string(),
                };
                publish(producer.as_ref(), key.clone(), serde_json::to_vec(&failure)).await;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(settings.interval) => {}
            _ = changed.notified() => tracing::info!(server = %target.name, "tool list changed; probing now"),
            _ = shutdown.changed() => {}
        }
    }
    if let Some(open) = session.take() {
        let _ = tokio::time::timeout(Duration::from_secs(1), open.cancel()).await;
    }
}

/// Starts one probe task per target.
pub fn spawn(
    targets: Vec<ProbeTarget>,
    settings: ProbeSettings,
    producer: Arc<dyn Producer>,
    shutdown: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    targets
        .into_iter()
        .map(|target| tokio::spawn(run(target, settings.clone(), producer.clone(), shutdown.clone())))
        .collect()
}
