//! The query API (DESIGN.md §7): REST over the store, filtered by the caller's project, plus the operator
//! commands (accept a baseline, change thresholds) that it publishes for the detectors to apply in order.

pub mod auth;
mod dashboard;
mod error;
pub mod guard;
pub mod metrics;
mod params;
pub mod readiness;
mod routes;

use std::sync::Arc;

use driftline_bus::Producer;
use driftline_schemas::{DetectorThresholds, Timestamp};
use driftline_store::Store;

pub use auth::{ApiKey, Auth, Principal, Scope};
pub use error::ApiError;
pub use params::{server_name, tool_name, Params};
pub use routes::router;

/// What the API handlers share.
#[derive(Clone)]
pub struct ApiState {
    pub store: Arc<dyn Store>,
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

/// The OpenAPI document of every stage on one port, with the bearer-key security scheme.
pub fn openapi_document(parts: Vec<utoipa::openapi::OpenApi>) -> utoipa::openapi::OpenApi {
    use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
    let mut document = utoipa::openapi::OpenApiBuilder::new()
        .info(
            utoipa::openapi::InfoBuilder::new()
                .title("driftline")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "Tool-list drift and return-shape drift of MCP servers: ingest and query API.",
                ))
                .build(),
        )
        .build();
    for part in parts {
        document.merge(part);
    }
    let components = document.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "api_key",
        SecurityScheme::Http(
            HttpBuilder::new().scheme(HttpAuthScheme::Bearer).description(Some("A project API key")).build(),
        ),
    );
    document.security = Some(vec![SecurityRequirement::new("api_key", Vec::<String>::new())]);
    document
}
