//! The query API (DESIGN.md §7): REST over the store, filtered by the caller's project, plus the operator
//! commands (accept a baseline, change thresholds) that it publishes for the detectors to apply in order.

mod dashboard;
mod routes;
mod timeline;
mod upstream;

use std::sync::Arc;

use driftline_bus::Producer;
use driftline_schemas::{DetectorThresholds, Timestamp};
use driftline_store::QueryStore;

use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use driftline_http::{ApiError, Auth};
use utoipa::openapi::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// What the API handlers share.
#[derive(Clone)]
pub struct ApiState {
    pub store: Arc<dyn QueryStore>,
    pub producer: Arc<dyn Producer>,
    pub auth: Arc<Auth>,
    /// Thresholds of a project that never changed them.
    pub default_thresholds: DetectorThresholds,
    /// Sessions at which an agent of a tool with open breaking or warning drift is HIGH risk.
    pub high_risk_sessions: u64,
    /// How long an operator command may take to be applied before the API answers 202 instead of 200.
    pub command_wait: std::time::Duration,
    pub clock: fn() -> Timestamp,
}

impl axum::extract::FromRef<ApiState> for Arc<Auth> {
    fn from_ref(state: &ApiState) -> Arc<Auth> {
        state.auth.clone()
    }
}

pub(crate) type Answer = Result<Response, ApiError>;

/// The API's routes and their OpenAPI description, generated from the handlers.
pub fn router(state: ApiState) -> (Router, OpenApi) {
    OpenApiRouter::new()
        .routes(routes!(routes::servers))
        .routes(routes!(routes::server))
        .routes(routes!(routes::drift_history))
        .routes(routes!(routes::drift_event))
        .routes(routes!(routes::drift_impact, routes::drift_impact_check))
        .routes(routes!(routes::drift_accept))
        .routes(routes!(routes::server_tools))
        .routes(routes!(routes::server_surfaces))
        .routes(routes!(upstream::upcoming))
        .routes(routes!(upstream::server_upcoming))
        .routes(routes!(upstream::accept_ahead))
        .routes(routes!(routes::tools))
        .routes(routes!(routes::tool_shape))
        .routes(routes!(routes::tool_calls))
        .routes(routes!(timeline::tool_contract))
        .routes(routes!(timeline::tool_timeline))
        .routes(routes!(timeline::server_timeline))
        .routes(routes!(routes::shape_drift))
        .routes(routes!(routes::get_thresholds, routes::put_thresholds))
        .routes(routes!(routes::return_value_stats))
        .routes(routes!(routes::dead_letters))
        .routes(routes!(routes::forget_server))
        .routes(routes!(routes::forget_tool))
        .routes(routes!(routes::healthz))
        .routes(routes!(routes::readyz))
        .route("/metrics", get(driftline_http::metrics::metrics))
        .route("/", get(dashboard::index))
        .route("/ui/app.js", get(dashboard::app))
        .route("/ui/style.css", get(dashboard::style))
        // Bodies are read under the server's limits before any handler (`driftline_http::body`), with a JSON
        // refusal; axum's own 2 MB default would answer a larger one in plain text.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state)
        .split_for_parts()
}

pub(crate) fn ok<T: serde::Serialize>(value: T) -> Answer {
    Ok(Json(value).into_response())
}
