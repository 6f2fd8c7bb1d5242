//! Signals grouped by project, server, tool and shape (DESIGN.md §4.4).

use std::collections::BTreeMap;

use driftline_schemas::{ShapeDriftSignal, Timestamp};

/// Signals grouped by `(project, server, tool, shape_hash)` (DESIGN.md §4.4).
#[derive(Debug, Clone, Default)]
pub struct SignalGroups {
    groups: BTreeMap<(String, String, String, String), SignalGroup>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalGroup {
    pub fingerprint: String,
    pub first_seen: Timestamp,
    pub last_seen: Timestamp,
    pub occurrences: u64,
    /// The first signal of the group, as its example.
    pub sample: ShapeDriftSignal,
}

impl SignalGroups {
    pub fn add(&mut self, signal: &ShapeDriftSignal) {
        let key =
            (signal.project.clone(), signal.server.clone(), signal.tool.clone(), signal.shape_hash.clone());
        self.groups
            .entry(key)
            .and_modify(|group| {
                group.first_seen = group.first_seen.min(signal.detected_at);
                group.last_seen = group.last_seen.max(signal.detected_at);
                group.occurrences += 1;
            })
            .or_insert_with(|| SignalGroup {
                fingerprint: signal.fingerprint.clone(),
                first_seen: signal.detected_at,
                last_seen: signal.detected_at,
                occurrences: 1,
                sample: signal.clone(),
            });
    }

    pub fn iter(&self) -> impl Iterator<Item = &SignalGroup> {
        self.groups.values()
    }
}
