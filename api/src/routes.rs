//! The query API's handlers over servers, drift, tools and settings, each with its OpenAPI entry, and the
//! operator commands the API publishes and waits for.

use std::collections::HashMap;
use std::time::Instant;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use driftline_bus::{Message, Topic};
#[allow(unused_imports)] // named in the OpenAPI annotations
use driftline_schemas::api::{
    AcceptResult, DeadLetterCount, DriftImpact, ErrorBody, RecentCall, ReturnValueStats, ServerHealth,
    ShapeDriftList, ThresholdsView, ToolSchema, ToolShape, ToolSummary,
};
use driftline_schemas::{DetectorThresholds, OperatorCommand, ServerName, ToolName};
#[allow(unused_imports)] // named in the OpenAPI annotations
use driftline_schemas::{SchemaDriftEvent, ServerSurfaces};
use driftline_store::ImpactQuery;
use serde_json::{json, Value};

use driftline_http::{server_name, tool_name, Admin, ApiError, Params, Reader};

use crate::{ok, Answer, ApiState};

#[utoipa::path(get, path = "/api/health/servers", tag = "health",
    responses((status = 200, description = "Every server of the project", body = [ServerHealth]), (status = 401, body = ErrorBody)))]
pub(crate) async fn servers(State(state): State<ApiState>, who: Reader) -> Answer {
    ok(state.store.servers(&who.project).await.map_err(ApiError::store_unavailable)?)
}

#[utoipa::path(get, path = "/api/health/servers/{name}", tag = "health", params(("name" = String, Path, description = "Server name")),
    responses((status = 200, body = ServerHealth), (status = 404, body = ErrorBody)))]
pub(crate) async fn server(State(state): State<ApiState>, who: Reader, Path(name): Path<String>) -> Answer {
    let name = server_name(&name)?;
    let servers = state.store.servers(&who.project).await.map_err(ApiError::store_unavailable)?;
    match servers.into_iter().find(|s| s.server_name == name) {
        Some(server) => ok(server),
        None => Err(ApiError::not_found(format!("server {name:?} has not been seen in this project"))),
    }
}

#[utoipa::path(get, path = "/api/health/servers/{name}/drift-history", tag = "drift",
    params(("name" = String, Path, description = "Server name"), ("limit" = Option<u32>, Query, description = "1-100, default 10"),
        ("list_bytes" = Option<u32>, Query, description = "Tool-list text to answer with, newest events first (the newest event's always): 0 to 33554432, the default; older events come with `lists_omitted`")),
    responses((status = 200, description = "A bare array of events, newest first", body = Vec<SchemaDriftEvent>), (status = 400, body = ErrorBody)))]
pub(crate) async fn drift_history(
    State(state): State<ApiState>,
    who: Reader,
    Path(name): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Answer {
    let name = server_name(&name)?;
    let params = Params(params);
    let limit = params.int("limit", 10, 1, 100)?;
    let most = HISTORY_LIST_BYTES as u32;
    let list_bytes = params.int("list_bytes", most, 0, most)? as usize;
    let history = state.store.drift_history(&who.project, &name, limit, list_bytes);
    ok(history.await.map_err(ApiError::store_unavailable)?)
}

/// The tool lists a drift history answers with: its newest events' up to this much stored text (the
/// newest event's always), so that a server declaring large lists cannot make one answer hundreds of
/// megabytes; older events come with `lists_omitted` and their lists from `drift-events/{id}`.
pub const HISTORY_LIST_BYTES: usize = 32 << 20;

#[utoipa::path(get, path = "/api/health/servers/{name}/drift-events/{id}", tag = "drift",
    params(("name" = String, Path, description = "Server name"), ("id" = String, Path, description = "Event id, as in the drift history")),
    responses((status = 200, description = "The event with both full tool lists", body = SchemaDriftEvent), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn drift_event(
    State(state): State<ApiState>,
    who: Reader,
    Path((name, id)): Path<(String, String)>,
) -> Answer {
    let name = server_name(&name)?;
    // Ids are `drift-` and hex (derived from the input record); anything else names no event.
    if id.len() > 128 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(ApiError::bad_request(
            "id: an event id holds letters, digits, '-' and '_' (at most 128)",
        ));
    }
    match state.store.drift_event(&who.project, &name, &id).await.map_err(ApiError::store_unavailable)? {
        Some(event) => ok(event),
        None => {
            Err(ApiError::not_found(format!("no drift event {id:?} for server {name:?} in this project")))
        }
    }
}

#[utoipa::path(get, path = "/api/health/servers/{name}/drift-impact", tag = "drift",
    params(("name" = String, Path, description = "Server name"), ("tool_name" = String, Query, description = "Tool"),
        ("hours" = Option<u32>, Query, description = "1-720, default 24")),
    responses((status = 200, body = DriftImpact), (status = 400, body = ErrorBody)))]
pub(crate) async fn drift_impact(
    State(state): State<ApiState>,
    who: Reader,
    Path(name): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Answer {
    let name = server_name(&name)?;
    let params = Params(params);
    let tool = tool_name(params.required("tool_name")?)?;
    let hours = params.int("hours", 24, 1, 720)?;
    impact(&state, &who, &name, &tool, hours, None).await
}

/// The impact of a tool's drift on its callers, against its current input schema or a candidate's.
async fn impact(
    state: &ApiState,
    who: &Reader,
    server: &ServerName,
    tool: &ToolName,
    hours: u32,
    input_schema: Option<&Value>,
) -> Answer {
    let query = ImpactQuery {
        project: &who.project,
        server,
        tool,
        hours,
        now: (state.clock)(),
        high_risk_sessions: state.high_risk_sessions,
        input_schema,
    };
    ok(state.store.drift_impact(query).await.map_err(ApiError::store_unavailable)?)
}

/// A candidate tool's input schema, to check observed calls against (`driftline impact`).
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ImpactCheck {
    tool_name: String,
    /// The candidate's `inputSchema` for the tool.
    input_schema: Value,
    /// 1-720, default 24.
    #[serde(default)]
    hours: Option<u32>,
}

#[utoipa::path(post, path = "/api/health/servers/{name}/drift-impact", tag = "drift",
    params(("name" = String, Path, description = "Server name")),
    request_body(content = ImpactCheck, description = "A tool of a candidate list: which observed calls would its input schema reject? Records nothing."),
    responses((status = 200, body = DriftImpact), (status = 400, body = ErrorBody)))]
pub(crate) async fn drift_impact_check(
    State(state): State<ApiState>,
    who: Reader,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Answer {
    let name = server_name(&name)?;
    let check: ImpactCheck = serde_json::from_slice(&body).map_err(|err| {
        ApiError::bad_request(format!("body must be {{\"tool_name\", \"input_schema\", \"hours\"}}: {err}"))
    })?;
    let tool = tool_name(&check.tool_name)?;
    let hours = check.hours.unwrap_or(24);
    if !(1..=720).contains(&hours) {
        return Err(ApiError::bad_request(format!("hours = {hours} must be in [1, 720]")));
    }
    impact(&state, &who, &name, &tool, hours, Some(&check.input_schema)).await
}

/// Publishes a command and waits (briefly) for a worker to apply it: 200 with its result, or 202.
pub(crate) async fn run_command(state: &ApiState, command: OperatorCommand) -> Answer {
    let id = command.id().to_owned();
    let payload = serde_json::to_vec(&command).map_err(|err| ApiError::bad_request(err.to_string()))?;
    // An acceptance rides the server's tool-list partition, in order with its lists and read by the
    // detector that owns the server; threshold changes concern every detector of the project.
    let topic = command_topic(&command);
    state.producer.publish(vec![Message { topic, key: command.key(), payload }]).await?;
    let started = Instant::now();
    while started.elapsed() < state.command_wait {
        if let Some(result) = state.store.command_result(&id).await.map_err(ApiError::store_unavailable)? {
            if let Some(error) = result.get("error").and_then(Value::as_str) {
                return Err(ApiError::bad_request(error));
            }
            return ok(result);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Ok((StatusCode::ACCEPTED, Json(json!({"command_id": id, "status": "pending"}))).into_response())
}

/// Where a command rides: a server's on its tool-list partition, a tool's on its span partition (each in
/// order with the data it concerns, on the detector that owns it), a project's on the commands topic.
fn command_topic(command: &OperatorCommand) -> Topic {
    match command {
        OperatorCommand::AcceptBaseline { .. }
        | OperatorCommand::AcceptRelease { .. }
        | OperatorCommand::ForgetServer { .. } => Topic::ToolLists,
        OperatorCommand::ForgetTool { .. } => Topic::Spans,
        OperatorCommand::SetThresholds { .. } => Topic::Commands,
    }
}

pub(crate) fn command_id(state: &ApiState, kind: &str, key: &str) -> String {
    let now = (state.clock)();
    let nonce: u64 = rand_u64();
    format!("{kind}-{}-{:016x}", now.as_millis(), nonce ^ hash_str(key))
}

fn hash_str(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// A per-process unique number for command ids (no randomness crate needed for uniqueness here).
fn rand_u64() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    nanos.rotate_left(17) ^ count ^ u64::from(std::process::id())
}

#[utoipa::path(post, path = "/api/health/servers/{name}/drift-accept", tag = "drift", params(("name" = String, Path, description = "Server name")),
    responses((status = 200, description = "Applied", body = AcceptResult), (status = 202, description = "Queued behind the data"),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn drift_accept(
    State(state): State<ApiState>,
    caller: Admin,
    Path(name): Path<String>,
) -> Answer {
    let who = caller.into_principal();
    let name = server_name(&name)?;
    let known = state
        .store
        .servers(&who.project)
        .await
        .map_err(ApiError::store_unavailable)?
        .iter()
        .any(|s| s.server_name == name);
    if !known {
        return Err(ApiError::not_found(format!("server {name:?} has not been seen in this project")));
    }
    let id = command_id(&state, "accept", &format!("{}/{name}", who.project));
    let command =
        OperatorCommand::AcceptBaseline { id, project: who.project, server: name, accepted_by: who.name };
    run_command(&state, command).await
}

/// Frees a server's detector state (its baseline and newest list: the next list starts a new baseline,
/// and its place in the project's `limits.max_servers_per_project`) and that of each of its tools the
/// store knows (their places in `max_tools_per_project`). History stays: events, snapshots, calls.
#[utoipa::path(delete, path = "/api/servers/{name}/state", tag = "health", params(("name" = String, Path, description = "Server name")),
    responses((status = 200, description = "Applied: `forgotten` says whether the server had state; `tools` how many tools were asked to forget theirs"),
        (status = 202, description = "Queued behind the data"), (status = 403, body = ErrorBody)))]
pub(crate) async fn forget_server(
    State(state): State<ApiState>,
    caller: Admin,
    Path(name): Path<String>,
) -> Answer {
    let who = caller.into_principal();
    let name = server_name(&name)?;
    let tools = state
        .store
        .tools(&who.project, 720, (state.clock)())
        .await
        .map_err(ApiError::store_unavailable)?
        .into_iter()
        .filter(|tool| tool.server == *name)
        .filter_map(|tool| driftline_schemas::ToolName::parse(tool.tool).ok())
        .collect::<Vec<_>>();
    let count = tools.len();
    let messages = tools
        .into_iter()
        .map(|tool| {
            let key = format!("{}/{name}/{tool}", who.project);
            let command = OperatorCommand::ForgetTool {
                id: command_id(&state, "forget", &key),
                project: who.project.clone(),
                server: name.clone(),
                tool,
                by: who.name.clone(),
            };
            let payload =
                serde_json::to_vec(&command).map_err(|err| ApiError::bad_request(err.to_string()))?;
            Ok(Message { topic: Topic::Spans, key: command.key(), payload })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    if !messages.is_empty() {
        state.producer.publish(messages).await?;
    }
    let id = command_id(&state, "forget", &format!("{}/{name}", who.project));
    let command = OperatorCommand::ForgetServer { id, project: who.project, server: name, by: who.name };
    let answer = run_command(&state, command).await?;
    if answer.status() != StatusCode::OK {
        return Ok(answer);
    }
    let body = axum::body::to_bytes(answer.into_body(), 1 << 20)
        .await
        .map_err(|err| ApiError::bad_request(err.to_string()))?;
    let mut result: Value = serde_json::from_slice(&body).unwrap_or_else(|_| json!({}));
    result["tools"] = json!(count);
    ok(result)
}

/// Frees a tool's detector state (its return-shape window and contract check; its next call starts
/// them anew) and its place in the project's `limits.max_tools_per_project`.
#[utoipa::path(delete, path = "/api/tools/{server}/{tool}/state", tag = "tools",
    params(("server" = String, Path, description = "Server name"), ("tool" = String, Path, description = "Tool name")),
    responses((status = 200, description = "Applied: `forgotten` says whether the tool had state"), (status = 202, description = "Queued behind the data"),
        (status = 403, body = ErrorBody)))]
pub(crate) async fn forget_tool(
    State(state): State<ApiState>,
    caller: Admin,
    Path((server, tool)): Path<(String, String)>,
) -> Answer {
    let who = caller.into_principal();
    let (server, tool) = (server_name(&server)?, tool_name(&tool)?);
    let id = command_id(&state, "forget", &format!("{}/{server}/{tool}", who.project));
    run_command(&state, OperatorCommand::ForgetTool { id, project: who.project, server, tool, by: who.name })
        .await
}

/// Records of the project the detector could not use, by kind: calls of tools beyond the project's
/// limits among them (ingest acknowledged them before the detector could tell).
#[utoipa::path(get, path = "/api/health/dead-letters", tag = "health",
    responses((status = 200, description = "Counts by kind, with the newest reason", body = [DeadLetterCount])))]
pub(crate) async fn dead_letters(State(state): State<ApiState>, who: Reader) -> Answer {
    ok(state.store.dead_letters(&who.project).await.map_err(ApiError::store_unavailable)?)
}

#[utoipa::path(get, path = "/api/servers/{name}/tools", tag = "tools", params(("name" = String, Path, description = "Server name")),
    responses((status = 200, body = [ToolSchema])))]
pub(crate) async fn server_tools(
    State(state): State<ApiState>,
    who: Reader,
    Path(name): Path<String>,
) -> Answer {
    let name = server_name(&name)?;
    ok(state.store.tool_schemas(&who.project, &name).await.map_err(ApiError::store_unavailable)?)
}

/// Instructions, prompts, resources and resource templates of the server's newest capture; an empty
/// object where none was captured (a producer that sends only tools).
#[utoipa::path(get, path = "/api/servers/{name}/surfaces", tag = "tools", params(("name" = String, Path, description = "Server name")),
    responses((status = 200, body = ServerSurfaces)))]
pub(crate) async fn server_surfaces(
    State(state): State<ApiState>,
    who: Reader,
    Path(name): Path<String>,
) -> Answer {
    let name = server_name(&name)?;
    let surfaces =
        state.store.server_surfaces(&who.project, &name).await.map_err(ApiError::store_unavailable)?;
    ok(surfaces.unwrap_or_default())
}

#[utoipa::path(get, path = "/api/tools", tag = "tools", params(("hours" = Option<u32>, Query, description = "1-720, default 24")),
    responses((status = 200, body = [ToolSummary])))]
pub(crate) async fn tools(
    State(state): State<ApiState>,
    who: Reader,
    Query(params): Query<HashMap<String, String>>,
) -> Answer {
    let hours = Params(params).int("hours", 24, 1, 720)?;
    ok(state.store.tools(&who.project, hours, (state.clock)()).await.map_err(ApiError::store_unavailable)?)
}

#[utoipa::path(get, path = "/api/tools/{server}/{tool}/shape", tag = "tools",
    params(("server" = String, Path, description = "Server name"), ("tool" = String, Path, description = "Tool name")),
    responses((status = 200, body = ToolShape), (status = 404, body = ErrorBody)))]
pub(crate) async fn tool_shape(
    State(state): State<ApiState>,
    who: Reader,
    Path((server, tool)): Path<(String, String)>,
) -> Answer {
    let (server, tool) = (server_name(&server)?, tool_name(&tool)?);
    match state.store.tool_shape(&who.project, &server, &tool).await.map_err(ApiError::store_unavailable)? {
        Some(shape) => ok(shape),
        None => {
            Err(ApiError::not_found(format!("no calls of {server}/{tool} have been seen in this project")))
        }
    }
}

#[utoipa::path(get, path = "/api/tools/{server}/{tool}/calls", tag = "tools",
    params(("server" = String, Path, description = "Server name"), ("tool" = String, Path, description = "Tool name"),
        ("hours" = Option<u32>, Query, description = "Calls received in the last 1-720 hours, default 1"),
        ("limit" = Option<u32>, Query, description = "1-1000, default 100")),
    responses((status = 200, description = "The tool's stored calls, newest first", body = [RecentCall]),
        (status = 400, body = ErrorBody)))]
pub(crate) async fn tool_calls(
    State(state): State<ApiState>,
    who: Reader,
    Path((server, tool)): Path<(String, String)>,
    Query(params): Query<HashMap<String, String>>,
) -> Answer {
    let (server, tool) = (server_name(&server)?, tool_name(&tool)?);
    let params = Params(params);
    let hours = params.int("hours", 1, 1, 720)?;
    let limit = params.int("limit", 100, 1, 1000)?;
    let now = (state.clock)().as_millis();
    let since = driftline_schemas::Timestamp::from_millis(now - i64::from(hours) * 3_600_000)
        .ok_or_else(|| ApiError::bad_request("time out of range"))?;
    let calls = state
        .store
        .recent_calls(&who.project, &server, &tool, since, limit)
        .await
        .map_err(ApiError::store_unavailable)?;
    ok(calls)
}

#[utoipa::path(get, path = "/api/shape-drift", tag = "tools", params(("hours" = Option<u32>, Query, description = "1-720, default 24")),
    responses((status = 200, body = ShapeDriftList)))]
pub(crate) async fn shape_drift(
    State(state): State<ApiState>,
    who: Reader,
    Query(params): Query<HashMap<String, String>>,
) -> Answer {
    let hours = Params(params).int("hours", 24, 1, 720)?;
    let groups = state
        .store
        .shape_drift(&who.project, hours, (state.clock)())
        .await
        .map_err(ApiError::store_unavailable)?;
    ok(ShapeDriftList { window_hours: hours, groups })
}

fn thresholds_view(thresholds: DetectorThresholds) -> ThresholdsView {
    let (min_calls, max_calls) = DetectorThresholds::MIN_HISTORY_CALLS;
    let (min_bytes, max_bytes) = DetectorThresholds::MAX_BYTES;
    ThresholdsView {
        thresholds,
        bounds: json!({
            "min_history_calls": [min_calls, max_calls],
            "history_window": [format!("max(10, min_history_calls)"), DetectorThresholds::HISTORY_WINDOW_MAX],
            "tool_return_value_max_bytes": [min_bytes, max_bytes],
            "context_growth_tokens": [0, DetectorThresholds::CONTEXT_GROWTH_TOKENS_MAX],
            "context_growth_percent": [0, DetectorThresholds::CONTEXT_GROWTH_PERCENT_MAX],
        }),
    }
}

#[utoipa::path(get, path = "/api/settings/detector-thresholds", tag = "settings", responses((status = 200, body = ThresholdsView)))]
pub(crate) async fn get_thresholds(State(state): State<ApiState>, who: Reader) -> Answer {
    ok(thresholds_view(project_thresholds(&state, &who.project).await?))
}

/// The project's thresholds, or the defaults when it never changed them.
pub(crate) async fn project_thresholds(
    state: &ApiState,
    project: &str,
) -> Result<DetectorThresholds, ApiError> {
    let stored = state.store.thresholds(project).await.map_err(ApiError::store_unavailable)?;
    Ok(stored.unwrap_or(state.default_thresholds))
}

#[utoipa::path(put, path = "/api/settings/detector-thresholds", tag = "settings",
    request_body(content = DetectorThresholds, description = "Keys left out keep their value"),
    responses((status = 200, body = ThresholdsView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub(crate) async fn put_thresholds(
    State(state): State<ApiState>,
    caller: Admin,
    body: axum::body::Bytes,
) -> Answer {
    let who = caller.into_principal();
    let current = project_thresholds(&state, &who.project).await?;
    // Keys left out keep their current value; unknown keys are an error that names them.
    let mut merged = serde_json::to_value(current).map_err(|err| ApiError::bad_request(err.to_string()))?;
    let update: serde_json::Map<String, Value> = serde_json::from_slice(&body)
        .map_err(|err| ApiError::bad_request(format!("body must be a JSON object of thresholds: {err}")))?;
    for (key, value) in update {
        merged[key.as_str()] = value;
    }
    let thresholds: DetectorThresholds = serde_json::from_value(merged)
        .map_err(|err| ApiError::bad_request(format!("invalid thresholds: {err}")))?;
    thresholds.validate().map_err(|err| ApiError::bad_request(err.to_string()))?;
    let id = command_id(&state, "thresholds", &who.project);
    let answer =
        run_command(&state, OperatorCommand::SetThresholds { id, project: who.project, thresholds }).await?;
    if answer.status() == StatusCode::OK {
        return ok(thresholds_view(thresholds));
    }
    Ok(answer)
}

#[utoipa::path(get, path = "/api/settings/return-value-stats", tag = "settings",
    params(("hours" = Option<u32>, Query, description = "1-720, default 24")), responses((status = 200, body = ReturnValueStats)))]
pub(crate) async fn return_value_stats(
    State(state): State<ApiState>,
    who: Reader,
    Query(params): Query<HashMap<String, String>>,
) -> Answer {
    let hours = Params(params).int("hours", 24, 1, 720)?;
    ok(state
        .store
        .return_value_stats(&who.project, hours, (state.clock)())
        .await
        .map_err(ApiError::store_unavailable)?)
}

#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "The process is alive")))]
pub(crate) async fn healthz() -> Answer {
    ok(json!({"status": "ok"}))
}

#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses((status = 200, description = "The store answers"), (status = 503, body = ErrorBody)))]
pub(crate) async fn readyz(State(state): State<ApiState>) -> Answer {
    if let Some(reason) = driftline_http::readiness::failure() {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, reason));
    }
    state.store.ping().await.map_err(ApiError::store_unavailable)?;
    ok(json!({"status": "ready"}))
}
