//! Declared vs observed output: whether a tool's return shapes meet the `outputSchema` its accepted
//! tool list declares, one state per `project/server/tool`.
//!
//! Each conclusive call is checked against the declaration ([`check`]); the last `history_window`
//! verdicts form a window. A mismatch fires a signal when mismatches are at least two thirds of a window
//! of at least `min_history_calls` calls, once, until mismatches stop dominating or a new declaration
//! arrives. The state holds the declaration, counters, one bit per window call and the last mismatch;
//! never a return value.

mod check;

use std::collections::VecDeque;
use std::sync::Arc;

use driftline_schemas::api::{ContractState, LastMismatch, ToolContract};
use driftline_schemas::{
    derive_id, CallStatus, DetectorThresholds, InputPosition, OutputDeclaration, OutputKind,
    ShapeDriftSignal, ShapeOutcome, ShapeRanking, ShapeReason, SignalKind, Timestamp, ToolCallRecord,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

pub use check::{
    check, CompiledOutput, Verdict, MAX_REASONS, MISSING_REQUIRED, MISSING_STRUCTURED_CONTENT, NOT_ALLOWED,
    SCHEMA_NODE_LIMIT, STEP_BUDGET,
};

use crate::shape::shape_hex8;
use crate::shape_drift::Observation;
use crate::tool_drift::canonical_json;

/// The declaration a tool's calls are checked against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Declared {
    pub schema: Value,
    /// Hex8 of the schema's canonical JSON.
    pub hash: String,
    pub declared_at: Timestamp,
    pub sequence: u64,
}

/// Contract state for one tool.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ToolContractState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    declared: Option<Declared>,
    /// The newest declaration applied, kept after a withdrawal so that a replayed older one stays old.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sequence: Option<u64>,
    #[serde(default)]
    checked: u64,
    #[serde(default)]
    mismatched: u64,
    #[serde(default)]
    inconclusive: u64,
    /// One verdict per checked call, oldest first: `1` a mismatch.
    #[serde(default)]
    window: Window,
    /// A firing disarms until mismatches stop dominating; stored this way round so the default is armed.
    #[serde(default)]
    disarmed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_mismatch: Option<LastMismatch>,
    /// The declaration compiled, built on first use (and again after deserialisation).
    #[serde(skip)]
    compiled: Option<Arc<CompiledOutput>>,
}

/// The cache is derived from `declared`, so it takes no part in equality.
impl PartialEq for ToolContractState {
    fn eq(&self, other: &Self) -> bool {
        self.declared == other.declared
            && self.sequence == other.sequence
            && self.checked == other.checked
            && self.mismatched == other.mismatched
            && self.inconclusive == other.inconclusive
            && self.window == other.window
            && self.disarmed == other.disarmed
            && self.last_mismatch == other.last_mismatch
    }
}

/// A call whose shape the declaration does not admit, while mismatches dominate the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MismatchFiring {
    pub shape: String,
    pub reasons: Vec<ShapeReason>,
    /// Mismatches in the window, and checked calls in it (this call included).
    pub mismatches: u32,
    pub window_size: u32,
}

impl ToolContractState {
    /// Applies a declaration: one with `sequence` <= the held one's is old (a replay) and changes nothing
    /// (returns false). A new one replaces the declaration (a `None` schema withdraws it: the state goes
    /// back to no declaration), resets the counters and the window and re-arms; returns true. A new one
    /// declaring the very same schema (the tool changed elsewhere, say its description) only advances
    /// the sequence: what was learnt against that schema still holds.
    pub fn declare(&mut self, declaration: &OutputDeclaration) -> bool {
        if self.sequence.is_some_and(|held| declaration.sequence <= held) {
            return false;
        }
        let sequence = declaration.sequence;
        self.sequence = Some(sequence);
        if let (Some(held), Some(schema)) = (&mut self.declared, &declaration.output_schema) {
            if held.schema == *schema {
                held.sequence = sequence;
                return true;
            }
        }
        let declared = declaration.output_schema.as_ref().map(|schema| Declared {
            hash: declaration.schema_hash.clone().unwrap_or_else(|| schema_hash(schema)),
            schema: schema.clone(),
            declared_at: declaration.declared_at,
            sequence,
        });
        *self = ToolContractState { declared, sequence: Some(sequence), ..ToolContractState::default() };
        true
    }

    pub fn declared(&self) -> Option<&Declared> {
        self.declared.as_ref()
    }

    /// One call. Without a declaration: nothing. Calls that did not succeed are not counted; other
    /// inconclusive outcomes (as for the shape detector, oversized by the project's threshold included,
    /// and a check that cannot conclude) count in `inconclusive` only. A conclusive shape is checked and
    /// its verdict enters the window; a mismatch fires when the window including it holds at least
    /// `min_history_calls` calls, at least two thirds of them mismatches, and the state is armed.
    pub fn observe(
        &mut self,
        call: Observation<'_>,
        span_id: &str,
        at: Timestamp,
        thresholds: &DetectorThresholds,
    ) -> Option<MismatchFiring> {
        let declared = self.declared.as_ref()?;
        let shape = match conclusive_shape(&call, thresholds) {
            Conclusive::NotCounted => return None,
            Conclusive::Inconclusive => {
                self.inconclusive += 1;
                return None;
            }
            Conclusive::Shape(shape) => shape,
        };
        let compiled = self.compiled.get_or_insert_with(|| Arc::new(CompiledOutput::new(&declared.schema)));
        let reasons = match compiled.check(shape) {
            Verdict::Inconclusive => {
                self.inconclusive += 1;
                return None;
            }
            Verdict::Admitted => None,
            Verdict::Mismatch(reasons) => Some(reasons),
        };
        self.checked += 1;
        self.window.push(reasons.is_some(), thresholds.history_window);
        let (total, mismatches) = self.window.counts(thresholds.history_window);
        let dominant = dominates(mismatches, total);
        if !dominant {
            self.disarmed = false;
        }
        let reasons = reasons?;
        self.mismatched += 1;
        self.last_mismatch = Some(LastMismatch {
            shape: clip(shape, LAST_MISMATCH_SHAPE_BYTES),
            reasons: reasons.iter().take(LAST_MISMATCH_REASONS).map(clipped).collect(),
            span_id: span_id.to_owned(),
            at,
        });
        let fires = dominant && total >= thresholds.min_history_calls && !self.disarmed;
        if !fires {
            return None;
        }
        self.disarmed = true;
        Some(MismatchFiring { shape: shape.to_owned(), reasons, mismatches, window_size: total })
    }

    /// The most this state holds under `thresholds` besides its declaration (a copy of a schema in its
    /// server's list, which the project's list-text budget bounds): the verdict ring, at most twice
    /// `history_window` long as allocated, and the last mismatch (its shape clipped to
    /// [`LAST_MISMATCH_SHAPE_BYTES`], [`LAST_MISMATCH_REASONS`] clipped reasons, a span id).
    pub fn worst_case_bytes(thresholds: &DetectorThresholds) -> u64 {
        let ring = 2 * u64::from(thresholds.history_window) + 8;
        let reason = std::mem::size_of::<ShapeReason>() + 4 * (REASON_TEXT_BYTES + 4);
        std::mem::size_of::<Self>() as u64
            + ring
            + (LAST_MISMATCH_SHAPE_BYTES + LAST_MISMATCH_REASONS * reason + driftline_schemas::MAX_ID_BYTES)
                as u64
    }

    /// Heap and inline bytes this state holds besides its declaration.
    pub fn size_bytes(&self) -> usize {
        let last = self.last_mismatch.as_ref().map_or(0, |last| {
            last.shape.len()
                + last.span_id.len()
                + last
                    .reasons
                    .iter()
                    .map(|r| {
                        std::mem::size_of::<ShapeReason>()
                            + r.path.len()
                            + [&r.before, &r.after, &r.detail]
                                .iter()
                                .map(|t| t.as_ref().map_or(0, String::len))
                                .sum::<usize>()
                    })
                    .sum::<usize>()
        });
        std::mem::size_of::<Self>() + self.window.0.capacity() + last
    }

    /// Declared vs observed, for the API; `None` without a declaration.
    pub fn view(&self, thresholds: &DetectorThresholds) -> Option<ToolContract> {
        let declared = self.declared.as_ref()?;
        let (total, mismatches) = self.window.counts(thresholds.history_window);
        let state = if total < thresholds.min_history_calls {
            ContractState::Priming
        } else if dominates(mismatches, total) {
            ContractState::Mismatch
        } else {
            ContractState::Agrees
        };
        Some(ToolContract {
            declared_schema: declared.schema.clone(),
            declared_hash: declared.hash.clone(),
            declared_at: declared.declared_at,
            state,
            checked: self.checked,
            mismatched: self.mismatched,
            inconclusive: self.inconclusive,
            window_size: total,
            window_mismatches: mismatches,
            last_mismatch: self.last_mismatch.clone(),
            // The observed dominant shape is the shape detector's; whoever holds both fills these in
            // (with `agrees`).
            observed_agrees: None,
            disagreements: Vec::new(),
        })
    }

    /// Drops the oldest verdicts until at most `len` remain (a smaller `history_window` takes effect), and
    /// gives back the memory a longer window held.
    pub fn shrink_to(&mut self, len: u32) {
        self.window.shrink_to(len);
        self.window.0.shrink_to_fit();
    }
}

/// Addresses a firing as a stored signal: the declared schema stands where a shape signal has its
/// baseline shape.
pub fn signal(
    record: &ToolCallRecord,
    position: InputPosition,
    firing: MismatchFiring,
    declared: &Declared,
) -> ShapeDriftSignal {
    let shape_hash = shape_hex8(&firing.shape);
    ShapeDriftSignal {
        id: derive_id(OutputKind::DeclaredOutputMismatch, &record.key().to_string(), position),
        kind: SignalKind::DeclaredOutputMismatch,
        project: record.project.to_string(),
        server: record.server.to_string(),
        tool: record.tool.to_string(),
        detected_at: record.ingested_at,
        fingerprint: format!("{}:{}:{shape_hash}", SignalKind::DeclaredOutputMismatch.as_str(), record.tool),
        shape: firing.shape,
        shape_hash,
        baseline_shape: canonical_json(&declared.schema),
        baseline_hash: declared.hash.clone(),
        baseline_count: firing.window_size.saturating_sub(firing.mismatches),
        window_size: firing.window_size,
        // Returns the declaration does not admit break whoever reads them by the declaration.
        ranking: ShapeRanking::Breaking,
        reasons: firing.reasons,
        span_id: record.span_id.clone(),
        call_started_at: Some(record.started_at),
    }
}

/// Whether the declaration admits a shape (for the API's "does the observed dominant shape agree?"):
/// `None` when the check cannot conclude; the reasons when it does not.
pub fn agrees(declared: &Declared, shape: &str) -> (Option<bool>, Vec<ShapeReason>) {
    match check(&declared.schema, shape) {
        Verdict::Admitted => (Some(true), Vec::new()),
        Verdict::Mismatch(reasons) => (Some(false), reasons),
        Verdict::Inconclusive => (None, Vec::new()),
    }
}

/// Mismatches dominate: at least two thirds of the window (exactly two thirds counts).
fn dominates(mismatches: u32, total: u32) -> bool {
    total > 0 && 3 * u64::from(mismatches) >= 2 * u64::from(total)
}

/// Hex8 of a schema's canonical JSON, for a declaration that arrives without its hash.
fn schema_hash(schema: &Value) -> String {
    shape_hex8(&canonical_json(schema))
}

enum Conclusive<'a> {
    NotCounted,
    Inconclusive,
    Shape(&'a str),
}

/// What the shape detector would make of a call (`ToolShapeState::observe`): not counted when it did
/// not succeed, inconclusive without a fingerprinted shape within the project's size threshold.
fn conclusive_shape<'a>(call: &Observation<'a>, thresholds: &DetectorThresholds) -> Conclusive<'a> {
    if call.status != CallStatus::Success || call.outcome == ShapeOutcome::NotSuccess {
        return Conclusive::NotCounted;
    }
    let max_bytes = u64::from(thresholds.tool_return_value_max_bytes);
    let oversized = call.compact_bytes.is_some_and(|bytes| bytes > max_bytes);
    // As for the shape detector: a shape longer than its value allows is not the walk's.
    let bound = crate::shape_drift::shape_text_bound(call.compact_bytes.unwrap_or(max_bytes));
    match (call.outcome, call.shape) {
        (ShapeOutcome::Fingerprinted, Some(shape)) if !oversized && shape.len() as u64 <= bound => {
            Conclusive::Shape(shape)
        }
        _ => Conclusive::Inconclusive,
    }
}

/// The verdicts of the last checked calls, oldest first; serialised as a string of `0` (admitted) and
/// `1` (mismatch), one byte a call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Window(VecDeque<bool>);

/// Reasons the last mismatch keeps (the signal carries them all, up to `MAX_REASONS`).
pub const LAST_MISMATCH_REASONS: usize = 10;
/// Bytes of each text of a kept reason (path, before, after, detail); a longer one is cut at a character
/// boundary and ends with `…`.
pub const REASON_TEXT_BYTES: usize = 256;
/// Bytes of the last mismatching shape kept to show (the signal carries it whole).
pub const LAST_MISMATCH_SHAPE_BYTES: usize = 4096;

/// `text` cut to at most `most` bytes at a character boundary, ending with `…` when cut.
fn clip(text: &str, most: usize) -> String {
    if text.len() <= most {
        return text.to_owned();
    }
    let mut end = most - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn clipped(reason: &ShapeReason) -> ShapeReason {
    let clip = |text: &str| clip(text, REASON_TEXT_BYTES);
    ShapeReason {
        path: clip(&reason.path),
        change: reason.change,
        before: reason.before.as_deref().map(clip),
        after: reason.after.as_deref().map(clip),
        detail: reason.detail.as_deref().map(clip),
    }
}

impl Window {
    fn push(&mut self, mismatch: bool, history_window: u32) {
        self.shrink_to(history_window.saturating_sub(1));
        self.0.push_back(mismatch);
    }

    fn shrink_to(&mut self, len: u32) {
        let len = len as usize;
        if self.0.len() > len {
            self.0.drain(..self.0.len() - len);
        }
    }

    /// Calls and mismatches among the newest `history_window` verdicts.
    fn counts(&self, history_window: u32) -> (u32, u32) {
        let skip = self.0.len().saturating_sub(history_window as usize);
        let (total, mismatches) =
            self.0.iter().skip(skip).fold((0u32, 0u32), |(total, m), &bit| (total + 1, m + u32::from(bit)));
        (total, mismatches)
    }
}

impl Serialize for Window {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let bits: String = self.0.iter().map(|&mismatch| if mismatch { '1' } else { '0' }).collect();
        serializer.serialize_str(&bits)
    }
}

impl<'de> Deserialize<'de> for Window {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let bits = String::deserialize(deserializer)?;
        bits.chars()
            .map(|bit| match bit {
                '0' => Ok(false),
                '1' => Ok(true),
                other => Err(serde::de::Error::custom(format!("a window holds 0 and 1, not {other:?}"))),
            })
            .collect::<Result<VecDeque<bool>, D::Error>>()
            .map(Window)
    }
}

#[cfg(test)]
mod tests;
