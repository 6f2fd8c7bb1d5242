//! The query API (DESIGN.md §7): REST over the store, filtered by the caller's project, plus the operator
//! commands (accept a baseline, change thresholds) that it publishes for the detectors to apply in order.

mod dashboard;
mod routes;
mod timeline;

use std::sync::Arc;

use driftline_bus::Producer;
use driftline_schemas::{DetectorThresholds, Timestamp};
use driftline_store::QueryStore;

use driftline_http::Auth;
pub use routes::router;

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
