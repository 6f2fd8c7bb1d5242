//! Bodies of the query API (DESIGN.md §7). The CLI client and the dashboard read these.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    DetectorThresholds, ServerStatus, Severity, ShapeOutcome, ShapeRanking, ShapeReason, SignalKind,
    Timestamp,
};

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
    /// Tools whose returns, for now, mostly do not meet their declared output schema.
    #[serde(default)]
    pub contract_mismatches: Vec<String>,
    /// What the current tool list and instructions cost a model's context (`o200k_base` tokens, bytes of
    /// compact JSON); absent until a list is seen.
    #[serde(default)]
    pub context_cost: Option<crate::ContextCost>,
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
    /// What the tool's current `inputSchema` says of the calls this agent made in the window, from the
    /// shapes of the arguments they sent; absent when none of its spans recorded arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<ArgumentCheck>,
}

/// An agent's observed calls checked against a tool's input schema: counts, never values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ArgumentCheck {
    /// Calls whose arguments' shape the schema rejects.
    pub rejected_calls: u64,
    /// Calls whose arguments' shape it admits (what a shape cannot show is admitted).
    pub accepted_calls: u64,
    /// Calls with no recorded arguments, or a shape not kept or not checkable: not known either way.
    pub unknown_calls: u64,
    /// The first reason of each rejected shape, most calls first (at most [`ArgumentCheck::MAX_REASONS`]):
    /// `filters: required by the declared schema, missing`.
    pub reasons: Vec<String>,
}

impl ArgumentCheck {
    pub const MAX_REASONS: usize = 5;
}

impl ToolConsumer {
    /// What the tool's input schema says of this agent's real calls, in the words the CLI, the dashboard
    /// and notifications use: `23 of 24 calls would be rejected — filters: required by the declared schema,
    /// missing`.
    pub fn real_calls(&self) -> String {
        let calls = self.call_count;
        match &self.arguments {
            None => "no recorded arguments".to_owned(),
            Some(check) if check.rejected_calls > 0 => {
                let reason = check.reasons.first().map(|r| format!(" — {r}")).unwrap_or_default();
                format!("{} of {calls} calls would be rejected{reason}", check.rejected_calls)
            }
            Some(check) if check.unknown_calls > 0 => format!(
                "{} of {calls} calls accepted, {} with arguments not recorded or not checkable",
                check.accepted_calls, check.unknown_calls
            ),
            Some(check) => format!("all {} calls accepted", check.accepted_calls),
        }
    }
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
    /// How its returns meet its declared output schema (`None`: it declares none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<ContractState>,
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
    /// The declared output schema and how the returns meet it; absent when the accepted tool list
    /// declares no `outputSchema` for the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<ToolContract>,
}

/// Where a tool's returns stand against its declared `outputSchema`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContractState {
    /// Fewer than `min_history_calls` conclusive calls checked in the window.
    Priming,
    /// Mismatches do not dominate the window.
    Agrees,
    /// Mismatches are at least two thirds of the window (a signal fired).
    Mismatch,
}

impl ContractState {
    pub fn as_str(self) -> &'static str {
        match self {
            ContractState::Priming => "priming",
            ContractState::Agrees => "agrees",
            ContractState::Mismatch => "mismatch",
        }
    }
}

/// The last call whose shape the declaration did not admit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LastMismatch {
    pub shape: String,
    pub reasons: Vec<ShapeReason>,
    pub span_id: String,
    pub at: Timestamp,
}

/// Declared vs observed for one tool (`GET /api/tools/{server}/{tool}/contract`, and inside the shape view).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolContract {
    /// The accepted baseline's `outputSchema`, as declared.
    #[schema(value_type = Object)]
    pub declared_schema: Value,
    pub declared_hash: String,
    pub declared_at: Timestamp,
    pub state: ContractState,
    /// Conclusive calls checked against this declaration, and how many it did not admit.
    pub checked: u64,
    pub mismatched: u64,
    /// Calls that could not be checked (absent, truncated, oversized or unparseable values, a schema too
    /// large to check). A typed sentinel is admitted where it sits: it stands for a value not looked into.
    pub inconclusive: u64,
    /// The window the firing rule reads: its size and the mismatches in it.
    pub window_size: u32,
    pub window_mismatches: u32,
    pub last_mismatch: Option<LastMismatch>,
    /// Whether the declaration admits the tool's observed dominant shape (`None` while there is none, or
    /// when the check is inconclusive), and why not. Set by the worker with the shape view.
    #[serde(default)]
    pub observed_agrees: Option<bool>,
    #[serde(default)]
    pub disagreements: Vec<ShapeReason>,
}

/// `GET /api/tools/{server}/{tool}/contract`: the declaration, the observed dominant shape, whether the
/// declaration admits it, and the mismatch signals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ContractReport {
    pub server: String,
    pub tool: String,
    /// `None` when the accepted tool list declares no output schema for this tool.
    pub contract: Option<ToolContract>,
    /// The observed dominant shape (`None` while priming or heterogeneous), its share of the window.
    pub observed_shape: Option<String>,
    pub observed_hash: Option<String>,
    pub observed_share: Option<f64>,
    /// Whether the declaration admits the observed dominant shape (`None` when either is missing or the
    /// check is inconclusive), and why not.
    pub agrees: Option<bool>,
    pub disagreements: Vec<ShapeReason>,
    pub signal_groups: Vec<SignalGroup>,
}

/// Records of a project the detector could not use, by kind of refusal (`GET /api/health/dead-letters`,
/// the dashboard's overview, `driftline health`): a client whose calls are dropped for a limit learns it
/// here, since ingest acknowledged them before the detector could tell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeadLetterCount {
    /// `tool_limit`, `server_limit`, `list_limit`, `quarantined` or `unusable`.
    pub kind: String,
    pub count: u64,
    pub last_at: Timestamp,
    /// The newest refusal's reason, as the dead letter carries it.
    pub last_reason: String,
}

impl DeadLetterCount {
    /// Counts of one kind summed (several input streams keep their own), the newest reason kept.
    pub fn merge(counts: impl IntoIterator<Item = DeadLetterCount>) -> Vec<DeadLetterCount> {
        let mut merged: std::collections::BTreeMap<String, DeadLetterCount> = Default::default();
        for count in counts {
            match merged.get_mut(&count.kind) {
                Some(held) => {
                    held.count += count.count;
                    if count.last_at > held.last_at {
                        held.last_at = count.last_at;
                        held.last_reason = count.last_reason;
                    }
                }
                None => {
                    merged.insert(count.kind.clone(), count);
                }
            }
        }
        merged.into_values().collect()
    }
}

/// One stored call, as the drill-down into a tool's raw calls lists it (newest first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RecentCall {
    pub span_id: String,
    pub session_id: Option<String>,
    pub agent_name: Option<String>,
    pub started_at: Timestamp,
    pub ingested_at: Timestamp,
    pub duration_ms: f64,
    /// `success` or `error`.
    pub status: String,
    pub error: Option<String>,
    pub shape_outcome: String,
    pub shape_hash: Option<String>,
    pub compact_bytes: Option<u64>,
}

/// One time bucket of a tool's (or a server's) calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CallBucket {
    /// The bucket's start (aligned to its size).
    pub start: Timestamp,
    pub calls: u64,
    pub errors: u64,
    /// Nearest-rank percentiles of `duration_ms`; `None` without calls.
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    /// Calls with a conclusive shape, and the share of the most frequent one among them (`None` without).
    pub fingerprinted: u64,
    pub dominant_share: Option<f64>,
}

/// Something that happened at a point in time, drawn on a timeline's axis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TimelineMarker {
    pub at: Timestamp,
    /// `drift_event`, `shape_drift` or `declared_output_mismatch`.
    pub kind: String,
    pub id: String,
    /// The tool it concerns: a signal's tool; for a drift event on a tool's timeline that tool (the event
    /// changed it), on a server's timeline `None`.
    pub tool: Option<String>,
    pub label: String,
    /// `BREAKING`/`WARNING`/`COMPATIBLE` for drift events, the ranking for signals.
    pub severity: String,
}

/// `GET /api/tools/{server}/{tool}/timeline` and `GET /api/health/servers/{name}/timeline`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Timeline {
    pub server: String,
    /// `None` for a server's timeline (all its tools).
    pub tool: Option<String>,
    pub hours: u32,
    pub bucket_seconds: u32,
    pub from: Timestamp,
    pub to: Timestamp,
    pub buckets: Vec<CallBucket>,
    pub markers: Vec<TimelineMarker>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SignalGroup {
    #[serde(default)]
    pub kind: SignalKind,
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
