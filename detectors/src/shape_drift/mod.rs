//! The return-shape drift detector of DESIGN.md §4, one state per `project/server/tool`.
//!
//! The window holds small slot ids, not strings: each distinct shape in the window is stored once, with
//! its count, and leaves the table when its count drops to zero.

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

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Slot {
    shape: Box<str>,
    count: u32,
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
    pub baseline_shape: String,
    pub baseline_count: u32,
    pub window_size: u32,
    pub ranked: Ranked,
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
            (outcome, _, _) => outcome,
        };
        self.telemetry.add(outcome, 1);
        let shape = match (outcome, call.shape) {
            (ShapeOutcome::Fingerprinted, Some(shape)) => shape,
            _ => return None,
        };
        let firing = self.check(shape, thresholds);
        self.push(shape, thresholds.history_window);
        firing
    }

    fn check(&self, shape: &str, thresholds: &DetectorThresholds) -> Option<Firing> {
        let total = self.window_size();
        let (dominant, count) = self.dominant()?;
        let fires =
            total >= thresholds.min_history_calls && 3 * count >= 2 * total && &*dominant.shape != shape;
        fires.then(|| Firing {
            shape: shape.to_owned(),
            baseline_shape: dominant.shape.to_string(),
            baseline_count: count,
            window_size: total,
            ranked: rank(&dominant.shape, shape),
        })
    }

    fn push(&mut self, shape: &str, history_window: u32) {
        self.shrink_to(history_window.saturating_sub(1));
        let slot = match self.slots.iter().position(|s| s.count > 0 && &*s.shape == shape) {
            Some(slot) => slot,
            None => {
                let free = self.slots.iter().position(|s| s.count == 0);
                let slot = free.unwrap_or(self.slots.len());
                let entry = Slot { shape: shape.into(), count: 0 };
                match free {
                    Some(_) => self.slots[slot] = entry,
                    None => self.slots.push(entry),
                }
                slot
            }
        };
        self.slots[slot].count += 1;
        // history_window <= 10000, so a slot index always fits.
        self.window.push_back(slot as u16);
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
        self.slots.iter().filter(|s| s.count > 0).max_by_key(|s| s.count).map(|s| (s, s.count))
    }

    /// Count of each distinct shape in the window.
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
                hex8: shape_hex8(&slot.shape),
                count,
                window_size: total,
            },
            _ => ShapeStatus::Heterogeneous { window_size: total },
        }
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
        baseline_hash: shape_hex8(&firing.baseline_shape),
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
