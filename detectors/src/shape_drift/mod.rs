//! The return-shape drift detector of DESIGN.md §4, one state per `project/server/tool`.
//!
//! The window holds small slot ids, not strings: each distinct shape in the window is stored once, with
//! its count, and leaves the table when its count drops to zero.
//!
//! Shapes are compared by digest; their texts are kept within [`SHAPE_TEXT_BYTES_PER_TOOL`] (the
//! dominant shape's always): return values keyed by ids make every call a new shape, and a text per call
//! would let one tool hold megabytes. Only a shape that is not dominant loses its text, fewest calls
//! first, and the next call of that shape brings it back. The verdicts stay those of unbounded texts: a
//! signal needs a baseline holding two thirds of the window, and a shape without its text holds less
//! than half (it was not dominant) until a call of it arrives — with the window full its share cannot
//! grow without one, and while the window fills it falls.

mod groups;
mod rank;

use std::collections::VecDeque;
use std::fmt;

use driftline_schemas::api::OutcomeCounts;
use driftline_schemas::{
    derive_id, CallStatus, DetectorThresholds, InputPosition, OutputKind, ShapeDriftSignal, ShapeOutcome,
    SignalKind, ToolCallRecord,
};
use serde::{Deserialize, Serialize};

pub use groups::{SignalGroup, SignalGroups};
pub use rank::{rank, Ranked, Ranking, EMPTY_SHAPE, UNREADABLE_SHAPE};

use crate::shape::shape_hex8;

/// Detector state for one tool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolShapeState {
    /// Slot ids of the conclusive shapes in the window, oldest first.
    window: VecDeque<u16>,
    /// Distinct shapes in the window; a slot with count 0 is free.
    slots: Vec<Slot>,
    /// What happened to this tool's return values.
    pub telemetry: OutcomeCounts,
}

/// Bytes of shape text one tool's window keeps beyond its dominant shape's.
pub const SHAPE_TEXT_BYTES_PER_TOOL: usize = 64 * 1024;

/// The longest shape the walk writes for a return value whose compact JSON is `compact_bytes` long: an
/// atom of one byte becomes a word of at most six (`1` → `number`), a control character in a key (one
/// byte, DEL) becomes six (`\u007f`), and nothing else grows more (proptest
/// `a_shape_is_at_most_six_times_its_value`). A record whose shape is longer did not come from the walk:
/// it is unparseable, so no record can put more text in a window than its value's size allows.
pub const fn shape_text_bound(compact_bytes: u64) -> u64 {
    compact_bytes.saturating_mul(6).saturating_add(8)
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "SlotWire", into = "SlotWire")]
struct Slot {
    /// SHA-256 of the shape text, its first 16 bytes: what shapes are compared by.
    digest: u128,
    /// The text; empty where it was dropped for the tool's text budget (or the slot is free).
    shape: Box<str>,
    count: u32,
}

/// A slot as stored: states written before digests carry the text only, and get the digest on load.
#[derive(Serialize, Deserialize)]
struct SlotWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    digest: Option<String>,
    shape: Box<str>,
    count: u32,
}

impl From<SlotWire> for Slot {
    fn from(wire: SlotWire) -> Self {
        let digest = match wire.digest.as_deref().map(|hex| u128::from_str_radix(hex, 16)) {
            Some(Ok(digest)) => digest,
            _ => digest(&wire.shape),
        };
        Slot { digest, shape: wire.shape, count: wire.count }
    }
}

impl From<Slot> for SlotWire {
    fn from(slot: Slot) -> Self {
        SlotWire { digest: Some(format!("{:032x}", slot.digest)), shape: slot.shape, count: slot.count }
    }
}

fn digest(shape: &str) -> u128 {
    use sha2::{Digest, Sha256};
    let full = Sha256::digest(shape.as_bytes());
    let mut first = [0u8; 16];
    first.copy_from_slice(&full[..16]);
    u128::from_be_bytes(first)
}

/// What one call tells the detector. Built from a [`ToolCallRecord`], or directly in tests.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    pub status: CallStatus,
    pub outcome: ShapeOutcome,
    pub shape: Option<&'a str>,
    pub compact_bytes: Option<u64>,
}

impl<'a> From<&'a ToolCallRecord> for Observation<'a> {
    fn from(record: &'a ToolCallRecord) -> Self {
        Observation {
            status: record.status,
            outcome: record.shape_outcome,
            shape: record.shape.as_deref(),
            compact_bytes: record.compact_bytes,
        }
    }
}

/// A call whose shape differs from a stable baseline, before it is addressed as a signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firing {
    pub shape: String,
    /// Empty only where the text was dropped for the budget and an admin then shrank the window.
    pub baseline_shape: String,
    /// The baseline's digest (its hash whether or not its text was kept).
    pub baseline_digest: u128,
    pub baseline_count: u32,
    pub window_size: u32,
    pub ranked: Ranked,
}

impl Firing {
    /// `shape_hex8` of the baseline: the first 4 bytes of its SHA-256, which its digest begins with.
    pub fn baseline_hash(&self) -> String {
        format!("{:08x}", self.baseline_digest >> 96)
    }
}

/// Where a tool stands (DESIGN.md §4 "Status of a tool").
#[derive(Debug, Clone, PartialEq)]
pub enum ShapeStatus {
    /// Fewer than `min_history_calls` conclusive calls in the window.
    Priming {
        have: u32,
        need: u32,
    },
    /// No shape covers two thirds of the window: this tool cannot fire.
    Heterogeneous {
        window_size: u32,
    },
    Stable {
        shape: String,
        hex8: String,
        count: u32,
        window_size: u32,
    },
}

impl ShapeStatus {
    pub fn share(&self) -> Option<f64> {
        match self {
            ShapeStatus::Stable { count, window_size, .. } => {
                Some(f64::from(*count) / f64::from(*window_size))
            }
            _ => None,
        }
    }
}

impl fmt::Display for ShapeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeStatus::Priming { have, need } => write!(f, "priming {have}/{need}"),
            ShapeStatus::Heterogeneous { .. } => f.write_str("heterogeneous"),
            ShapeStatus::Stable { hex8, .. } => {
                let percent = (self.share().unwrap_or(0.0) * 100.0).floor();
                write!(f, "stable · {hex8} · {percent}%")
            }
        }
    }
}

impl ToolShapeState {
    /// Applies one call (DESIGN.md §4): inconclusive calls only count; a conclusive shape is checked
    /// against the window as it was **before** this call, then added to it.
    pub fn observe(&mut self, call: Observation<'_>, thresholds: &DetectorThresholds) -> Option<Firing> {
        self.observe_within(call, thresholds, SHAPE_TEXT_BYTES_PER_TOOL)
    }

    /// [`ToolShapeState::observe`] with the texts of shapes that are not dominant kept within `text_budget`.
    fn observe_within(
        &mut self,
        call: Observation<'_>,
        thresholds: &DetectorThresholds,
        text_budget: usize,
    ) -> Option<Firing> {
        if call.status != CallStatus::Success || call.outcome == ShapeOutcome::NotSuccess {
            self.telemetry.add(ShapeOutcome::NotSuccess, 1);
            return None;
        }
        let outcome = match (call.outcome, call.compact_bytes, call.shape) {
            (ShapeOutcome::Fingerprinted, Some(bytes), _)
                if bytes > u64::from(thresholds.tool_return_value_max_bytes) =>
            {
                ShapeOutcome::Oversized
            }
            (ShapeOutcome::Fingerprinted, _, None) => ShapeOutcome::Unparseable,
            (ShapeOutcome::Fingerprinted, bytes, Some(shape))
                if shape.len() as u64
                    > shape_text_bound(
                        bytes.unwrap_or(u64::from(thresholds.tool_return_value_max_bytes)),
                    ) =>
            {
                ShapeOutcome::Unparseable
            }
            (outcome, _, _) => outcome,
        };
        self.telemetry.add(outcome, 1);
        let shape = match (outcome, call.shape) {
            (ShapeOutcome::Fingerprinted, Some(shape)) => shape,
            _ => return None,
        };
        let digest = digest(shape);
        let firing = self.check(shape, digest, thresholds);
        self.push(shape, digest, thresholds.history_window, text_budget);
        firing
    }

    fn check(&self, shape: &str, digest: u128, thresholds: &DetectorThresholds) -> Option<Firing> {
        let total = self.window_size();
        let (dominant, count) = self.dominant()?;
        let fires =
            total >= thresholds.min_history_calls && 3 * count >= 2 * total && dominant.digest != digest;
        fires.then(|| Firing {
            shape: shape.to_owned(),
            baseline_shape: dominant.shape.to_string(),
            baseline_digest: dominant.digest,
            baseline_count: count,
            window_size: total,
            ranked: rank(&dominant.shape, shape),
        })
    }

    fn push(&mut self, shape: &str, digest: u128, history_window: u32, text_budget: usize) {
        self.shrink_to(history_window.saturating_sub(1));
        let slot = match self.slots.iter().position(|s| s.count > 0 && s.digest == digest) {
            Some(slot) => slot,
            None => {
                let free = self.slots.iter().position(|s| s.count == 0);
                let slot = free.unwrap_or(self.slots.len());
                let entry = Slot { digest, shape: Box::default(), count: 0 };
                match free {
                    Some(_) => self.slots[slot] = entry,
                    None => self.slots.push(entry),
                }
                slot
            }
        };
        if self.slots[slot].shape.is_empty() && !shape.is_empty() {
            self.slots[slot].shape = shape.into();
        }
        self.slots[slot].count += 1;
        // history_window <= 10000, so a slot index always fits.
        self.window.push_back(slot as u16);
        self.keep_texts_within_budget(slot, text_budget);
    }

    /// Drops the texts of shapes that are not dominant, fewest calls first (never `current`'s), until
    /// the others' texts fit `budget`.
    fn keep_texts_within_budget(&mut self, current: usize, budget: usize) {
        let dominant = self.dominant_index();
        let kept = |index: usize| Some(index) == dominant;
        let mut held: usize =
            self.slots.iter().enumerate().filter(|(i, _)| !kept(*i)).map(|(_, s)| s.shape.len()).sum();
        if held <= budget {
            return;
        }
        let mut candidates: Vec<(u32, usize)> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(i, s)| s.count > 0 && !s.shape.is_empty() && !kept(*i) && *i != current)
            .map(|(i, s)| (s.count, i))
            .collect();
        candidates.sort_unstable();
        for (_, index) in candidates {
            if held <= budget {
                break;
            }
            held -= self.slots[index].shape.len();
            self.slots[index].shape = Box::default();
        }
    }

    /// Drops the oldest shapes until at most `len` remain (a smaller `history_window` takes effect).
    pub fn shrink_to(&mut self, len: u32) {
        while self.window.len() > len as usize {
            if let Some(oldest) = self.window.pop_front() {
                let slot = &mut self.slots[usize::from(oldest)];
                slot.count -= 1;
                if slot.count == 0 {
                    slot.shape = Box::default();
                }
            }
        }
        while self.slots.last().is_some_and(|s| s.count == 0) {
            self.slots.pop();
        }
    }

    pub fn window_size(&self) -> u32 {
        self.window.len() as u32
    }

    fn dominant(&self) -> Option<(&Slot, u32)> {
        self.dominant_index().map(|index| (&self.slots[index], self.slots[index].count))
    }

    fn dominant_index(&self) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.count > 0)
            .max_by_key(|(_, s)| s.count)
            .map(|(i, _)| i)
    }

    /// Count of each distinct shape in the window (the text empty where it was dropped for the budget).
    pub fn window_counts(&self) -> Vec<(&str, u32)> {
        self.slots.iter().filter(|s| s.count > 0).map(|s| (&*s.shape, s.count)).collect()
    }

    pub fn status(&self, thresholds: &DetectorThresholds) -> ShapeStatus {
        let total = self.window_size();
        if total < thresholds.min_history_calls {
            return ShapeStatus::Priming { have: total, need: thresholds.min_history_calls };
        }
        match self.dominant() {
            Some((slot, count)) if 3 * count >= 2 * total => ShapeStatus::Stable {
                shape: slot.shape.to_string(),
                hex8: format!("{:08x}", slot.digest >> 96),
                count,
                window_size: total,
            },
            _ => ShapeStatus::Heterogeneous { window_size: total },
        }
    }

    /// [`ToolShapeState::shrink_to`], and the memory a longer window held goes back: after an admin
    /// shrinks `history_window`, [`ToolShapeState::worst_case_bytes`] at the new setting holds again.
    pub fn fit_to(&mut self, len: u32) {
        self.shrink_to(len);
        // Free slots among live ones stay where they are in a window of the old length: renumber the live.
        let mut renumbered = vec![u16::MAX; self.slots.len()];
        let mut live = Vec::with_capacity(self.slots.iter().filter(|s| s.count > 0).count());
        for (old, slot) in self.slots.drain(..).enumerate() {
            if slot.count > 0 {
                // At most `history_window` (≤ 10,000) shapes are live.
                renumbered[old] = live.len() as u16;
                live.push(slot);
            }
        }
        self.slots = live;
        for id in &mut self.window {
            *id = renumbered[usize::from(*id)];
        }
        self.window.shrink_to_fit();
    }

    /// The most [`ToolShapeState::size_bytes`] can reach under `thresholds`, whatever the returns: the
    /// ring and the slot table (each at most twice `history_window` long as allocated, a distinct shape
    /// per call at worst), [`SHAPE_TEXT_BYTES_PER_TOOL`] of texts beside the dominant's, and two texts of
    /// the longest shape a value within `tool_return_value_max_bytes` has (the dominant's, and the newest
    /// call's, kept whatever the budget). Tested at the bounds.
    pub fn worst_case_bytes(thresholds: &DetectorThresholds) -> u64 {
        let window = 2 * u64::from(thresholds.history_window) + 8;
        let text = shape_text_bound(u64::from(thresholds.tool_return_value_max_bytes));
        std::mem::size_of::<Self>() as u64
            + window * (std::mem::size_of::<u16>() + std::mem::size_of::<Slot>()) as u64
            + SHAPE_TEXT_BYTES_PER_TOOL as u64
            + 2 * text
    }

    /// Heap and inline bytes this state holds.
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.window.capacity() * std::mem::size_of::<u16>()
            + self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.slots.iter().map(|s| s.shape.len()).sum::<usize>()
    }
}

/// Addresses a firing as the signal stored and shown: id, tool, time, hashes.
pub fn signal(record: &ToolCallRecord, position: InputPosition, firing: Firing) -> ShapeDriftSignal {
    let shape_hash = shape_hex8(&firing.shape);
    ShapeDriftSignal {
        id: derive_id(OutputKind::ShapeDriftSignal, &record.key().to_string(), position),
        kind: SignalKind::ShapeDrift,
        call_started_at: Some(record.started_at),
        project: record.project.to_string(),
        server: record.server.to_string(),
        tool: record.tool.to_string(),
        detected_at: record.ingested_at,
        fingerprint: format!("tool_schema_drift:{}:{shape_hash}", record.tool),
        baseline_hash: firing.baseline_hash(),
        shape_hash,
        ranking: firing.ranked.signal_ranking(),
        reasons: firing.ranked.reasons,
        shape: firing.shape,
        baseline_shape: firing.baseline_shape,
        baseline_count: firing.baseline_count,
        window_size: firing.window_size,
        span_id: record.span_id.clone(),
    }
}

#[cfg(test)]
mod tests;
