//! Active MCP probing (DESIGN.md §5 "DOWN"): for each configured server, connect with the official Rust
//! SDK (rmcp) over Streamable HTTP, the legacy HTTP+SSE transport (`sse.rs`), or stdio to a child process
//! it starts (`stdio.rs`), follow every `tools/list` cursor, and publish the complete list as a
//! ToolListSnapshot (source `probe`, with the round-trip latency), or a ProbeFailure when the server cannot
//! be reached in time. The session stays open between probes so that `notifications/tools/list_changed`
//! triggers a probe at once; a session that ends (a child that exits) is probed at once, found DOWN, and
//! reconnected with capped exponential backoff.

mod events;
mod metrics;
mod sse;
mod stdio;
mod target;

use events::{Emit, ProbeFailed, ProbeSucceeded};
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use driftline_bus::{Message, Producer, Topic};
use driftline_schemas::{ProbeFailure, ServerSurfaces, SnapshotSource, Timestamp, ToolListSnapshot};
use rmcp::model::{ClientConfig, PaginatedRequestParams, ProtocolVersion, SubscriptionFilter};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::sync::{watch, Notify};

pub use target::{Endpoint, ProbeTarget, StdioCommand, TransportKind};

/// Reconnecting after a failure waits 1 s, 2 s, 4 s … up to this (and never longer than the interval).
const MAX_BACKOFF: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// The project probe results belong to.
    pub project: driftline_schemas::ProjectName,
    pub interval: Duration,
    /// Connecting, and each full `tools/list`, must finish within this.
    pub timeout: Duration,
    /// A larger list is reported as a failed probe (ingest and the detector would refuse it).
    pub limits: driftline_schemas::ToolListLimits,
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("invalid target: {0}")]
    Target(String),
    #[error("cannot start {0}: {1}")]
    Spawn(String, String),
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

impl Listener {
    /// A list-changed notification: probe now.
    fn list_changed(&self, list: &'static str) -> impl Future<Output = ()> + Send + 'static {
        let changed = self.changed.clone();
        async move {
            tracing::debug!(list, "list_changed received");
            changed.notify_one();
        }
    }
}

impl ClientHandler for Listener {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.list_changed("tools")
    }

    fn on_prompt_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.list_changed("prompts")
    }

    fn on_resource_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.list_changed("resources")
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }
}

/// An open MCP session, and the child process behind it when the server runs over stdio.
pub struct Session {
    service: RunningService<RoleClient, Listener>,
    child: Option<u32>,
    /// A 2026-07-28 session's `subscriptions/listen` stream, forwarding list changes to the probe loop.
    subscription: Option<tokio::task::JoinHandle<()>>,
}

impl Session {
    /// Whether the server side is gone (the child exited, the stream closed).
    fn ended(&self) -> bool {
        self.service.is_transport_closed() || self.service.is_closed()
    }

    /// Ends the session: a child is asked to exit (stdin closed, then SIGTERM, then killed) and reaped;
    /// with `kill`, its process group is killed at once (a probe that timed out).
    async fn close(mut self, kill: bool) {
        if let Some(task) = self.subscription.take() {
            task.abort();
        }
        if let (true, Some(pid)) = (kill, self.child) {
            stdio::kill_group(pid);
        }
        let _ = self.service.close_with_timeout(Duration::from_secs(8)).await;
    }
}

/// How a session starts: MCP 2026-07-28's `server/discover` first, falling back to the `initialize`
/// handshake of earlier revisions when the server says it does not know it (rmcp's `Auto`; a server that
/// ignores the request falls back after rmcp's 10 s). The legacy HTTP+SSE transport predates 2026-07-28.
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: None,
    }
}

async fn connect(server: &str, endpoint: &Endpoint, changed: Arc<Notify>) -> Result<Session, ProbeError> {
    let listener = Listener { changed: changed.clone() };
    let connect_error = |err: rmcp::service::ClientInitializeError| ProbeError::Connect(err.to_string());
    let (service, child) = match endpoint {
        Endpoint::Http { url, headers, sse: false } => {
            let headers = headers.iter().cloned().collect();
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(headers);
            let transport = StreamableHttpClientTransport::from_config(config);
            (listener.serve_with_lifecycle(transport, lifecycle()).await.map_err(connect_error)?, None)
        }
        Endpoint::Http { url, headers, sse: true } => {
            let transport =
                sse::connect(url, headers).await.map_err(|err| ProbeError::Connect(err.to_string()))?;
            (listener.serve(transport).await.map_err(connect_error)?, None)
        }
        Endpoint::Stdio(command) => {
            let (transport, child) = stdio::spawn(server, command)
                .map_err(|err| ProbeError::Spawn(command.program.clone(), err.to_string()))?;
            // On failure the transport was dropped with the child in it: rmcp kills its process group and
            // reaps it (signalling the group here could reach a reused pid once it is reaped).
            (listener.serve_with_lifecycle(transport, lifecycle()).await.map_err(connect_error)?, child)
        }
    };
    let subscription = listen_for_changes(server, &service, changed).await;
    Ok(Session { service, child, subscription })
}

/// On a 2026-07-28 session list changes arrive on a `subscriptions/listen` stream, not as plain
/// notifications: one is opened for tools, prompts and resources, and each notification on it triggers a
/// probe. `None` on an earlier revision (its notifications reach the [`Listener`]) or when the server
/// refuses the stream (the interval still probes).
async fn listen_for_changes(
    server: &str,
    service: &RunningService<RoleClient, Listener>,
    changed: Arc<Notify>,
) -> Option<tokio::task::JoinHandle<()>> {
    let modern = service.peer_info().is_some_and(|info| !info.protocol_version.has_initialize());
    if !modern {
        return None;
    }
    let filter = SubscriptionFilter::builder()
        .tools_list_changed()
        .prompts_list_changed()
        .resources_list_changed()
        .build();
    let mut subscription = match service.peer().listen(filter).await {
        Ok(subscription) => subscription,
        Err(err) => {
            tracing::info!(server, error = %err, "subscriptions/listen refused; changes are seen at the next interval");
            return None;
        }
    };
    let server = server.to_owned();
    Some(tokio::spawn(async move {
        while let Ok(Some(notification)) = subscription.next().await {
            tracing::debug!(server = %server, ?notification, "list change on the subscription stream");
            changed.notify_one();
        }
        tracing::debug!(server = %server, "subscription stream ended");
    }))
}

/// Every tool the server declares, following `nextCursor` until it stops.
async fn list_all(session: &Session) -> Result<Vec<Value>, ProbeError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen = HashSet::new();
    loop {
        let params = PaginatedRequestParams::default().with_cursor(cursor.clone());
        let page = session
            .service
            .list_tools(Some(params))
            .await
            .map_err(|err| ProbeError::List(err.to_string()))?;
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

/// Follows a list's `nextCursor` until it stops: `page` fetches one page from a cursor, answering its
/// entries and the next cursor.
async fn all_pages<F, Fut>(mut page: F) -> Result<Vec<Value>, ProbeError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<(Vec<Value>, Option<String>), ProbeError>>,
{
    let (mut entries, mut cursor, mut seen) = (Vec::new(), None, HashSet::new());
    loop {
        let (found, next) = page(cursor.take()).await?;
        entries.extend(found);
        match next {
            Some(next) if !next.is_empty() => {
                if !seen.insert(next.clone()) {
                    return Err(ProbeError::CursorLoop(next));
                }
                cursor = Some(next);
            }
            _ => return Ok(entries),
        }
    }
}

/// JSON values of a page's entries.
fn values<T: serde::Serialize>(entries: Vec<T>) -> Result<Vec<Value>, ProbeError> {
    entries
        .into_iter()
        .map(|entry| serde_json::to_value(entry).map_err(|err| ProbeError::List(err.to_string())))
        .collect()
}

/// What the server shows the model besides its tools: the instructions of its initialize result, and
/// the prompts, resources and resource templates its capabilities declare (each list empty when it
/// declares none: the probe saw the whole server). A list the server fails to give is left uncaptured
/// (the detector keeps the last capture's) and logged: tools that answer keep a server UP.
async fn list_surfaces(session: &Session) -> ServerSurfaces {
    let service = &session.service;
    let info = service.peer_info();
    let capabilities = info.as_ref().map(|info| info.capabilities.clone()).unwrap_or_default();
    let failed =
        |what: &'static str| move |err: rmcp::ServiceError| ProbeError::List(format!("{what}: {err}"));
    let params = |cursor: Option<String>| Some(PaginatedRequestParams::default().with_cursor(cursor));
    let captured = |what: &'static str, list: Result<Vec<Value>, ProbeError>| match list {
        Ok(list) => Some(list),
        Err(err) => {
            tracing::warn!(list = what, error = %err, "server list not captured; the last capture stands");
            None
        }
    };
    let declares_prompts = capabilities.prompts.is_some();
    let declares_resources = capabilities.resources.is_some();
    let prompts = if declares_prompts {
        let pages = all_pages(|cursor| async move {
            let page = service.list_prompts(params(cursor)).await.map_err(failed("prompts/list"))?;
            Ok((values(page.prompts)?, page.next_cursor))
        });
        captured("prompts", pages.await)
    } else {
        Some(Vec::new())
    };
    let (resources, resource_templates) = if declares_resources {
        let resources = all_pages(|cursor| async move {
            let page = service.list_resources(params(cursor)).await.map_err(failed("resources/list"))?;
            Ok((values(page.resources)?, page.next_cursor))
        });
        let resources = captured("resources", resources.await);
        let templates = all_pages(|cursor| async move {
            let page = service
                .list_resource_templates(params(cursor))
                .await
                .map_err(failed("resources/templates/list"))?;
            Ok((values(page.resource_templates)?, page.next_cursor))
        });
        (resources, captured("resourceTemplates", templates.await))
    } else {
        (Some(Vec::new()), Some(Vec::new()))
    };
    ServerSurfaces {
        // Captured: a server that gives none has none (empty), not "unknown".
        instructions: info.map(|info| info.instructions.clone().unwrap_or_default()),
        prompts,
        resources,
        resource_templates,
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

/// Connects, reads the complete tool list (and what the server declares besides its tools) once and
/// closes the session: `driftline capture`.
pub async fn capture(
    endpoint: &Endpoint,
    timeout: Duration,
) -> Result<(Vec<Value>, ServerSurfaces), ProbeError> {
    let session = within(timeout, connect("capture", endpoint, Arc::new(Notify::new()))).await?;
    let captured = within(timeout, async {
        let tools = list_all(&session).await?;
        Ok((tools, list_surfaces(&session).await))
    })
    .await;
    session.close(captured.is_err()).await;
    captured
}

/// Waits until the session ends; never, without one.
async fn ended(session: &Option<Session>) {
    match session {
        Some(open) => {
            while !open.ended() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        None => std::future::pending().await,
    }
}

/// The wait before the next probe after `failures` failed ones in a row.
fn next_wait(failures: u32, interval: Duration) -> Duration {
    if failures == 0 {
        return interval;
    }
    let backoff = Duration::from_secs(1u64 << failures.saturating_sub(1).min(16));
    backoff.min(MAX_BACKOFF).min(interval)
}

/// Probes one server until `shutdown` turns true.
pub async fn run(
    target: ProbeTarget,
    settings: ProbeSettings,
    producer: Arc<dyn Producer>,
    mut shutdown: watch::Receiver<bool>,
) {
    let endpoint = match target.endpoint() {
        Ok(endpoint) => endpoint,
        Err(reason) => {
            // Configuration is checked at start; this only guards direct callers.
            tracing::error!(server = %target.name, %reason, "probe target refused");
            return;
        }
    };
    let changed = Arc::new(Notify::new());
    let key = driftline_schemas::ServerKey::new(settings.project.clone(), target.name.clone()).to_string();
    let mut session: Option<Session> = None;
    let mut failures = 0u32;
    while !*shutdown.borrow() {
        // The latency is the complete tools/list round trip, without starting a session (or a child).
        let mut started = Instant::now();
        let result = async {
            if session.is_none() {
                session =
                    Some(within(settings.timeout, connect(&target.name, &endpoint, changed.clone())).await?);
                started = Instant::now();
            }
            let (tools, surfaces) = match &session {
                Some(open) => {
                    within(settings.timeout, async { Ok((list_all(open).await?, list_surfaces(open).await)) })
                        .await?
                }
                None => return Err(ProbeError::Connect("no session".into())),
            };
            driftline_detectors::tool_drift::check_tool_list(&settings.limits, &tools)
                .and_then(|()| settings.limits.check_surfaces(&surfaces))
                .map_err(|err| ProbeError::List(err.to_string()))?;
            Ok((tools, surfaces))
        }
        .await;
        let latency_ms = started.elapsed().as_secs_f64() * 1e3;
        match result {
            Ok((tools, surfaces)) => {
                failures = 0;
                ProbeSucceeded { server: &target.name, tools: tools.len(), latency_ms }.emit();
                let snapshot = ToolListSnapshot {
                    schema_version: driftline_schemas::SCHEMA_VERSION,
                    project: settings.project.clone(),
                    server: target.name.clone(),
                    captured_at: now(),
                    source: SnapshotSource::Probe,
                    latency_ms: Some(latency_ms),
                    tools,
                    surfaces: Some(surfaces),
                    release: None,
                };
                publish(producer.as_ref(), key.clone(), serde_json::to_vec(&snapshot)).await;
            }
            Err(err) => {
                failures = failures.saturating_add(1);
                ProbeFailed { server: &target.name, endpoint: &endpoint.describe(), error: &err, failures }
                    .emit();
                // Drop the session: the next probe starts with a fresh initialize (and a fresh child).
                if let Some(open) = session.take() {
                    open.close(matches!(err, ProbeError::Timeout(_))).await;
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
            _ = tokio::time::sleep(next_wait(failures, settings.interval)) => {}
            _ = changed.notified() => tracing::info!(server = %target.name, "tool list changed; probing now"),
            _ = ended(&session) => tracing::info!(server = %target.name, "mcp session ended; probing now"),
            _ = shutdown.changed() => {}
        }
    }
    if let Some(open) = session.take() {
        open.close(false).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_interval_and_the_cap() {
        let s = Duration::from_secs;
        let waits: Vec<u64> = (0..10).map(|f| next_wait(f, s(60)).as_secs()).collect();
        assert_eq!(waits, [60, 1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(next_wait(3, s(2)), s(2));
        assert_eq!(next_wait(u32::MAX, s(3600)), MAX_BACKOFF);
    }
}
