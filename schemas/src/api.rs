//! Bodies of the query API (DESIGN.md §7). The CLI client and the dashboard read these.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{DetectorThresholds, ServerStatus, Severity, ShapeOutcome, ShapeRanking, ShapeReason, Timestamp};

/// Counts by classification: of open events (each by its worst change) in `open_drift`, of the changes
/// inside them in `open_changes`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OpenDriftCounts {
    pub breaking: u32,
    pub warning: u32,
    pub compatible: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ServerHealth {
    pub server_name: String,
    pub status: ServerStatus,
    pub schema_hash: Option<String>,
    pub tool_count: u32,
    pub last_seen: Option<Timestamp>,
    /// From probes, when probing is configured.
    pub latency_ms: Option<f64>,
    /// Open drift **events**, each counted once under its worst classification.
    pub open_drift: OpenDriftCounts,
    /// The **changes** inside the open events, each under its own classification (what the dashboard's
    /// Drift tab counts in its chips).
    #[serde(default)]
    pub open_changes: OpenDriftCounts,
    /// The worst security flag among open events: `high` must be shown wherever the server is.
    pub max_severity: Option<Severity>,
    /// Why the server is DOWN, or which drift makes it DEGRADED.
    pub note: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum Risk {
    Low,
    Medium,
    High,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolConsumer {
    pub agent_name: String,
    pub session_count: u64,
    pub call_count: u64,
    pub error_count: u64,
    pub avg_latency_ms: f64,
    pub last_called_at: Timestamp,
    pub risk: Risk,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DriftImpact {
    pub server_name: String,
    pub tool_name: String,
    pub window_hours: u32,
    pub consumers: Vec<ToolConsumer>,
    pub total_sessions: u64,
    /// "No recent callers — tool may be unused." when nobody called the tool in the window.
    pub message: Option<String>,
}

pub const NO_RECENT_CALLERS: &str = "No recent callers — tool may be unused.";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AcceptResult {
    pub server_name: String,
    /// False when there was nothing to accept (the server matches its baseline).
    pub accepted: bool,
    pub previous_hash: Option<String>,
    pub new_hash: Option<String>,
    pub event_ids: Vec<String>,
    pub accepted_by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolSchema {
    pub server_name: String,
    pub tool_name: String,
    pub description: Option<String>,
    pub input_schema: Value,
    pub captured_at: Timestamp,
}

/// A tool seen in traces (declared in a tool list or not).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolSummary {
    pub server: String,
    pub tool: String,
    pub calls: u64,
    pub errors: u64,
    pub avg_latency_ms: f64,
    pub last_called_at: Option<Timestamp>,
    /// `priming 4/10`, `stable · a1b2c3d4 · 97%`, `heterogeneous`.
    pub shape_status: String,
    /// Whether a tool list of the server declares it.
    pub declared: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ShapeState {
    Priming,
    Heterogeneous,
    Stable,
}

/// Counters of what happened to a tool's return values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OutcomeCounts {
    pub successful_calls: u64,
    pub fingerprinted: u64,
    pub oversized: u64,
    pub truncated_sentinel: u64,
    pub unparseable: u64,
    pub too_deep: u64,
    pub absent: u64,
    pub not_success: u64,
}

impl OutcomeCounts {
    /// Adds `n` calls with `outcome`; a successful call counts in `successful_calls` too.
    pub fn add(&mut self, outcome: ShapeOutcome, n: u64) {
        if outcome != ShapeOutcome::NotSuccess {
            self.successful_calls += n;
        }
        let counter = match outcome {
            ShapeOutcome::Fingerprinted => &mut self.fingerprinted,
            ShapeOutcome::Oversized => &mut self.oversized,
            ShapeOutcome::TruncatedSentinel => &mut self.truncated_sentinel,
            ShapeOutcome::Unparseable => &mut self.unparseable,
            ShapeOutcome::TooDeep => &mut self.too_deep,
            ShapeOutcome::Absent => &mut self.absent,
            ShapeOutcome::NotSuccess => &mut self.not_success,
        };
        *counter += n;
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolShape {
    pub server: String,
    pub tool: String,
    pub state: ShapeState,
    pub status: String,
    pub baseline_shape: Option<String>,
    pub baseline_hash: Option<String>,
    pub baseline_share: Option<f64>,
    pub window_size: u32,
    pub min_history_calls: u32,
    pub history_window: u32,
    pub telemetry: OutcomeCounts,
    pub signal_groups: Vec<SignalGroup>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SignalGroup {
    pub fingerprint: String,
    pub server: String,
    pub tool: String,
    pub shape: String,
    pub shape_hash: String,
    pub baseline_shape: String,
    pub baseline_hash: String,
    pub ranking: ShapeRanking,
    pub reasons: Vec<ShapeReason>,
    pub first_seen: Timestamp,
    pub last_seen: Timestamp,
    pub occurrences: u64,
    pub sample_span_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ShapeDriftList {
    pub window_hours: u32,
    pub groups: Vec<SignalGroup>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ThresholdsView {
    pub thresholds: DetectorThresholds,
    /// The bounds each key is checked against.
    pub bounds: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolOutcomeStats {
    pub server: String,
    pub tool: String,
    #[serde(flatten)]
    pub counts: OutcomeCounts,
    /// truncated_sentinel / successful_calls.
    pub truncation_rate: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReturnValueStats {
    pub window_hours: u32,
    pub totals: OutcomeCounts,
    pub truncation_rate: f64,
    pub tools: Vec<ToolOutcomeStats>,
}

/// A 4xx/5xx body: what was wrong, and for a batch each bad element.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<ErrorDetail>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    pub index: usize,
    pub reason: String,
}
