use std::collections::HashMap;
use std::time::Instant;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use driftline_bus::{Message, Topic};
use driftline_schemas::api::{DriftHistory, ShapeDriftList, ThresholdsView};
use driftline_schemas::{DetectorThresholds, OperatorCommand};
use driftline_store::ImpactQuery;
use serde_json::{json, Value};

use crate::{valid_server_name, ApiError, ApiState, Params, Scope};

type Answer = Result<Response, ApiError>;

pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/api/health/servers", get(servers))
        .route("/api/health/servers/{name}", get(server))
        .route("/api/health/servers/{name}/drift-history", get(drift_history))
        .route("/api/health/servers/{name}/drift-impact", get(drift_impact))
        .route("/api/health/servers/{name}/drift-accept", post(drift_accept))
        .route("/api/servers/{name}/tools", get(server_tools))
        .route("/api/tools", get(tools))
        .route("/api/tools/{server}/{tool}/shape", get(tool_shape))
        .route("/api/shape-drift", get(shape_drift))
        .route("/api/settings/detector-thresholds", get(get_thresholds).put(put_thresholds))
        .route("/api/settings/return-value-stats", get(return_value_stats))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(crate::metrics::metrics))
        .with_state(state)
}

fn ok<T: serde::Serialize>(value: T) -> Answer {
    Ok(Json(value).into_response())
}

async fn servers(State(state): State<ApiState>, headers: HeaderMap) -> Answer {
    let who = state.auth.authorize(&headers, Scope::Read)?;
    ok(state.store.servers(&who.project).await?)
}

async fn server(State(state): State<ApiState>, headers: HeaderMap, Path(name): Path<String>) -> Answer {
    let who = state.auth.authorize(&headers, Scope::Read)?;
    valid_server_name(&name)?;
    let servers = state.store.servers(&who.project).await?;
    match servers.into_iter().find(|s| s.server_name == name) {
        Some(server) => ok(server),
        None => Err(ApiError::not_found(format!("server {name:?} has not been seen in this project"))),
    }
}

async fn drift_history(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Answer {
    let who = state.auth.authorize(&headers, Scope::Read)?;
    valid_server_name(&name)?;
    let limit = Params(params).int("limit", 10, 1, 100)?;
    let events = state.store.drift_history(&who.project, &name, limit).await?;
    ok(DriftHistory { server_name: name, events })
}

async fn drift_impact(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Answer {
    let who = state.auth.authorize(&headers, Scope::Read)?;
    valid_server_name(&name)?;
    let params = Params(params);
    let tool = params.required("tool_name")?.to_owned();
    let hours = params.int("hours", 24, 1, 720)?;
    let query = ImpactQuery {
        project: &who.project,
        server: &name,
        tool: &tool,
        hours,
        now: (state.clock)(),
        high_risk_sessions: state.high_risk_sessions,
    };
    ok(state.store.drift_impact(query).await?)
}

/// Publishes a command and waits (briefly) for a worker to apply it: 200 with its result, or 202.
async fn run_command(state: &ApiState, command: OperatorCommand) -> Answer {
    let id = command.id().to_owned();
    let payload = serde_json::to_vec(&command).map_err(|err| ApiError::bad_request(err.to_string()))?;
    state.producer.publish(vec![Message { topic: Topic::Commands, key: command.key(), payload }]).await?;
    let started = Instant::now();
    while started.elapsed() < state.command_wait {
        if let Some(result) = state.store.command_result(&id).await? {
            if let Some(error) = result.get("error").and_then(Value::as_str) {
                return Err(ApiError::bad_request(error));
            }
            return ok(result);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Ok((StatusCode::ACCEPTED, Json(json!({"command_id": id, "status": "pending"}))).into_response())
}

fn command_id(state: &ApiState, kind: &str, key: &str) -> String {
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

async fn drift_accept(State(state): State<ApiState>, headers: HeaderMap, Path(name): Path<String>) -> Answer {
    let who = state.auth.authorize(&headers, Scope::Admin)?;
    valid_server_name(&name)?;
    let known = state.store.servers(&who.project).await?.iter().any(|s| s.server_name == name);
    if !known {
        return Err(ApiError::not_found(format!("server {name:?} has not been seen in this project")));
    }
    let id = command_id(&state, "accept", &format!("{}/{name}", who.project));
    let command =
        OperatorCommand::AcceptBaseline { id, project: who.project, server: name, accepted_by: who.name };
    run_command(&state, command).await
}

async fn server_tools(State(state): State<ApiState>, headers: HeaderMap, Path(name): Path<String>) -> Answer {
    let who = state.auth.authorize(&headers, Scope::Read)?;
    valid_server_name(&name)?;
    ok(state.store.tool_schemas(&who.project, &name).await?)
}

async fn tools(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Answer {
    let who = state.auth.authorize(&headers, Scope::Read)?;
    let hours = Params(params).int("hours", 24, 1, 720)?;
    ok(state.store.tools(&who.project, hours, (state.clock)()).await?)
}

async fn tool_shape(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Path((server, tool)): Path<(String, String)>,
) -> Answer {
    let who = state.auth.authorize(&headers, Scope::Read)?;
    valid_server_name(&server)?;
    match state.store.tool_shape(&who.project, &server, &tool).await? {
        Some(shape) => ok(shape),
        None => {
            Err(ApiError::not_found(format!("no calls of {server}/{tool} have been seen in this project")))
        }
    }
}

async fn shape_drift(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Answer {
    let who = state.auth.authorize(&headers, Scope::Read)?;
    let hours = Params(params).int("hours", 24, 1, 720)?;
    let groups = state.store.shape_drift(&who.project, hours, (state.clock)()).await?;
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
        }),
    }
}

async fn get_thresholds(State(state): State<ApiState>, headers: HeaderMap) -> Answer {
    let who = state.auth.authorize(&headers, Scope::Read)?;
    let thresholds = state.store.thresholds(&who.project).await?.unwrap_or(state.default_thresholds);
    ok(thresholds_view(thresholds))
}

async fn put_thresholds(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Answer {
    let who = state.auth.authorize(&headers, Scope::Admin)?;
    let current = state.store.thresholds(&who.project).await?.unwrap_or(state.default_thresholds);
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

async fn return_value_stats(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Answer {
    let who = state.auth.authorize(&headers, Scope::Read)?;
    let hours = Params(params).int("hours", 24, 1, 720)?;
    ok(state.store.return_value_stats(&who.project, hours, (state.clock)()).await?)
}

async fn healthz() -> Answer {
    ok(json!({"status": "ok"}))
}

async fn readyz(State(state): State<ApiState>) -> Answer {
    state.store.ping().await?;
    ok(json!({"status": "ready"}))
}
