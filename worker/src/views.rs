//! The rows and views the API reads, built from detector state: a server's row, a tool's shape and contract.

use driftline_detectors::contract;
use driftline_detectors::shape_drift::{ShapeStatus, ToolShapeState};
use driftline_detectors::tool_drift::{short_hash, ServerState};
use driftline_schemas::api::{ShapeState, ToolShape};
use driftline_schemas::{ContextCost, DetectorThresholds, ServerStatus, Timestamp};
use driftline_store::ServerRow;

use crate::ToolState;

/// What a server's row says of its current list.
pub(crate) struct ListSummary {
    pub hash: Option<String>,
    pub tool_count: u32,
    pub context: Option<ContextCost>,
}

pub(crate) fn server_row(
    project: &str,
    server: &str,
    state: &ServerState,
    list: ListSummary,
    latency_ms: Option<f64>,
    at: Timestamp,
) -> ServerRow {
    let status = state.status();
    let note = match (&state.down, status) {
        (Some(error), _) => Some(error.clone()),
        (None, ServerStatus::Degraded) if state.held.is_some() => state.held.clone(),
        (None, ServerStatus::Degraded) => {
            let baseline = state.baseline.as_ref().map(|b| short_hash(&b.hash)).unwrap_or_default();
            let current =
                state.observed.as_ref().map(|o| short_hash(&o.hash)).unwrap_or_else(|| baseline.clone());
            Some(format!("schema drift: {baseline} → {current}"))
        }
        _ => None,
    };
    ServerRow {
        project: project.to_owned(),
        server_name: server.to_owned(),
        status,
        schema_hash: list.hash,
        tool_count: list.tool_count,
        last_seen: Some(at),
        note,
        latency_ms,
        context: list.context,
    }
}

/// The API's view of a tool: its shape status, and how its returns meet its declared output (whether the
/// declaration admits the observed dominant shape is decided here, so the API runs no detection).
pub fn tool_view(server: &str, tool: &str, state: &ToolState, thresholds: &DetectorThresholds) -> ToolShape {
    let mut view = shape_view(server, tool, &state.shape, thresholds);
    view.contract = state.contract.view(thresholds).map(|mut contract| {
        if let (Some(declared), Some(shape)) = (state.contract.declared(), &view.baseline_shape) {
            (contract.observed_agrees, contract.disagreements) = contract::agrees(declared, shape);
        }
        contract
    });
    view
}

/// The API's view of a tool's shape status.
pub fn shape_view(
    server: &str,
    tool: &str,
    state: &ToolShapeState,
    thresholds: &DetectorThresholds,
) -> ToolShape {
    let status = state.status(thresholds);
    let (shape_state, baseline_shape, baseline_hash) = match &status {
        ShapeStatus::Priming { .. } => (ShapeState::Priming, None, None),
        ShapeStatus::Heterogeneous { .. } => (ShapeState::Heterogeneous, None, None),
        ShapeStatus::Stable { shape, hex8, .. } => {
            (ShapeState::Stable, Some(shape.clone()), Some(hex8.clone()))
        }
    };
    ToolShape {
        server: server.to_owned(),
        tool: tool.to_owned(),
        state: shape_state,
        status: status.to_string(),
        baseline_shape,
        baseline_hash,
        baseline_share: status.share(),
        window_size: state.window_size(),
        min_history_calls: thresholds.min_history_calls,
        history_window: thresholds.history_window,
        telemetry: state.telemetry,
        signal_groups: Vec::new(),
        contract: None,
    }
}
