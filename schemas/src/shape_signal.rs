//! Return-shape signals as stored and answered: ranking, reasons and the signal itself (DESIGN.md §4).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Timestamp;

/// How bad a return-shape change is for a consumer of the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ShapeRanking {
    Breaking,
    Compatible,
    Indeterminate,
}

impl ShapeRanking {
    pub fn as_str(self) -> &'static str {
        match self {
            ShapeRanking::Breaking => "breaking",
            ShapeRanking::Compatible => "compatible",
            ShapeRanking::Indeterminate => "indeterminate",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReasonChange {
    Removed,
    Added,
    TypeChanged,
}

/// One structural difference between the baseline shape and the new one, at a path such as `result.id`
/// or `rows[].a` (`(root)` for the value itself).
///
/// `before`/`after`: for `type_changed` the two kinds (`number`, `object`, …); for `removed`/`added` the
/// shape that went or came, with the other side `None` — except when an array emptied or filled, where
/// both sides are the array shapes (`[number]` ↔ `[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ShapeReason {
    pub path: String,
    pub change: ReasonChange,
    pub before: Option<String>,
    pub after: Option<String>,
    /// How people read it, when the generic wording would mislead (a declared-output mismatch says what
    /// the declaration asks: `temp_c: required by the declared schema, missing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl fmt::Display for ShapeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = &self.path;
        if let Some(detail) = &self.detail {
            return write!(f, "{path}: {detail}");
        }
        match (self.change, &self.before, &self.after) {
            (ReasonChange::Removed, _, Some(_)) => write!(f, "{path}: elements gone"),
            (ReasonChange::Removed, _, None) => write!(f, "{path}: removed"),
            (ReasonChange::Added, Some(_), _) => write!(f, "{path}: was empty, now populated"),
            (ReasonChange::Added, None, _) => write!(f, "{path}: added"),
            (ReasonChange::TypeChanged, before, after) => write!(
                f,
                "{path}: {} -> {}",
                before.as_deref().unwrap_or("?"),
                after.as_deref().unwrap_or("?")
            ),
        }
    }
}

/// What a shape signal says: the return shape moved away from the tool's own stable baseline
/// (`shape_drift`, DESIGN.md §4), or the returns stopped meeting the tool's declared `outputSchema`
/// (`declared_output_mismatch`; the baseline is then the declared schema).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SignalKind {
    #[default]
    ShapeDrift,
    DeclaredOutputMismatch,
}

impl SignalKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SignalKind::ShapeDrift => "shape_drift",
            SignalKind::DeclaredOutputMismatch => "declared_output_mismatch",
        }
    }
}

/// A call whose return shape differs from a stable baseline (DESIGN.md §2, §4), or from the tool's
/// declared output schema (`kind`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ShapeDriftSignal {
    pub id: String,
    /// Absent in signals stored before declared outputs were checked: those are all `shape_drift`.
    #[serde(default)]
    pub kind: SignalKind,
    pub project: String,
    pub server: String,
    pub tool: String,
    pub detected_at: Timestamp,
    /// `tool_schema_drift:<tool>:<hex8 of the new shape>`; the grouping key people see.
    pub fingerprint: String,
    pub shape: String,
    pub shape_hash: String,
    pub baseline_shape: String,
    pub baseline_hash: String,
    /// How many calls in the window had the baseline shape, and how many conclusive calls it held.
    pub baseline_count: u32,
    pub window_size: u32,
    pub ranking: ShapeRanking,
    pub reasons: Vec<ShapeReason>,
    pub span_id: String,
    /// When the firing call was made (its `started_at`), for timelines; absent in older signals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_started_at: Option<Timestamp>,
}
