//! What a diff lists and what it only counts: per-kind room, per-tool room, and the split of per-tool
//! work over threads.

use std::collections::BTreeMap;

use driftline_schemas::{Classification, SchemaChange, SecurityFlag, Severity};
use serde_json::Value;

use crate::tool_drift::parallel::threads_for;

/// At most this many changes of one kind of consequence (a classification with the worst security flag
/// it carries) are listed in one diff; the rest are counted in [`ListedChanges::omitted`]. A few
/// kilobytes of input can differ in hundreds of thousands of places (two long enums) and every change
/// repeats its tool's name and path: listing them all made a 1.5 MB list pair a 78 MB event.
pub const LISTED_CHANGES_PER_KIND: usize = 1_000;

/// At most this much text (names, paths, strings before and after) is listed per kind of consequence:
/// names and paths can be long, and each change repeats them.
pub const LISTED_BYTES_PER_KIND: usize = 1 << 20;

/// The changes one diff lists, in list order, and the count of those it does not list. The first change
/// of each kind of consequence is always listed, so the worst classification and the worst security flag
/// among the listed changes are those among all.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListedChanges {
    pub changes: Vec<SchemaChange>,
    pub omitted: BTreeMap<Classification, u64>,
}

impl ListedChanges {
    /// Every change found, listed or not.
    pub fn total(&self) -> u64 {
        self.changes.len() as u64 + self.omitted.values().sum::<u64>()
    }
}

/// Kinds of consequence: classification × worst security flag (none, low, medium, high).
pub(super) const KINDS: usize = 3 * 4;

#[derive(Default)]
pub(super) struct Listing {
    /// At most this many changes and bytes listed per kind of consequence.
    pub(super) per_kind: (usize, usize),
    pub(super) changes: Vec<SchemaChange>,
    /// Changes and bytes listed per kind of consequence.
    pub(super) listed: [(usize, usize); KINDS],
    pub(super) omitted: BTreeMap<Classification, u64>,
    /// Changes found so far, listed or not.
    pub(super) found: usize,
    /// Where an unlisted change is written, for the caller to refine and nobody to read.
    pub(super) unlisted: Option<SchemaChange>,
    /// A tool's own listing: what it found, listed or counted, in order (for [`Listing::take`]); past
    /// `entries` it stops keeping it (and cannot be taken).
    pub(super) order: Option<Vec<Found>>,
    pub(super) entries: usize,
}

/// A change a tool's own listing found: listed (the next of its changes), or counted (a stretch of
/// changes of one kind, the smallest of them `least` bytes).
#[derive(Clone, Copy)]
pub(super) enum Found {
    Listed { kind: usize, size: usize },
    Counted { kind: usize, classification: Classification, count: u64, least: usize },
}

/// How per-tool work of a diff is split: the threads for a count of tools, how many tools' results are
/// held at once, and the room of each tool's own listing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Split {
    pub threads: fn(usize) -> usize,
    pub at_once: usize,
    pub per_tool: ToolRoom,
}

impl Split {
    /// Every core for long lists, the changes of 256 tools at a time, each tool's own listing with room
    /// for 16 changes (16 KiB) of each kind and 1,024 entries of its order (listed changes and stretches
    /// of counted ones): a few MB held at most, and far more than a real tool's changes.
    pub const MACHINE: Split = Split {
        threads: threads_for,
        at_once: 256,
        per_tool: ToolRoom { changes: 16, bytes: 16 << 10, entries: 1_024 },
    };
}

/// The room of one tool's own listing on another thread: changes and bytes listed of each kind, and
/// entries of its order (listed changes and stretches of counted ones).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ToolRoom {
    pub changes: usize,
    pub bytes: usize,
    pub entries: usize,
}

impl ToolRoom {
    /// Room for everything (a tool's own listing that is never diffed again).
    #[cfg(test)]
    pub const UNBOUNDED: ToolRoom = ToolRoom { changes: usize::MAX, bytes: usize::MAX, entries: usize::MAX };
}

/// Whether a kind that listed `listed` changes of `bytes` has room for one more of `size` (the first of
/// each kind always has).
pub(super) fn has_room(
    (listed, bytes): (usize, usize),
    (most, most_bytes): (usize, usize),
    size: usize,
) -> bool {
    listed == 0 || (listed < most && bytes + size <= most_bytes)
}

impl Listing {
    pub(super) fn of_one_tool(room: ToolRoom) -> Self {
        Listing {
            per_kind: (room.changes, room.bytes),
            order: Some(Vec::new()),
            entries: room.entries,
            ..Listing::default()
        }
    }

    /// Counts a change of `kind` and `size` found: listed if its kind has room left, else counted as
    /// omitted.
    pub(super) fn admits(&mut self, kind: usize, size: usize, classification: Classification) -> bool {
        self.found += 1;
        let slot = &mut self.listed[kind];
        let listed = has_room(*slot, self.per_kind, size);
        if listed {
            slot.0 += 1;
            slot.1 += size;
        } else {
            *self.omitted.entry(classification).or_default() += 1;
        }
        if let Some(order) = self.order.as_mut().filter(|order| order.len() <= self.entries) {
            match (listed, order.last_mut()) {
                (true, _) => order.push(Found::Listed { kind, size }),
                (false, Some(Found::Counted { kind: last, count, least, .. })) if *last == kind => {
                    *count += 1;
                    *least = (*least).min(size);
                }
                (false, _) => order.push(Found::Counted { kind, classification, count: 1, least: size }),
            }
        }
        listed
    }

    /// Lists the changes a tool's own listing found, in order, as if this one had found them; false (and
    /// nothing taken) where a change it only counted would have been listed here.
    pub(super) fn take(&mut self, own: Listing) -> bool {
        let Some(order) = own.order else { return false };
        // A dry run over the counts: a stretch of counted changes all stay unlisted here if the smallest
        // does (nothing is listed in between).
        let mut listed = self.listed;
        for found in &order {
            match *found {
                Found::Listed { kind, size } => {
                    if has_room(listed[kind], self.per_kind, size) {
                        listed[kind].0 += 1;
                        listed[kind].1 += size;
                    }
                }
                Found::Counted { kind, least, .. } => {
                    if has_room(listed[kind], self.per_kind, least) {
                        return false;
                    }
                }
            }
        }
        let mut changes = own.changes.into_iter();
        for found in order {
            match found {
                Found::Listed { kind, size } => {
                    let Some(change) = changes.next() else { break };
                    if self.admits(kind, size, change.classification) {
                        self.changes.push(change);
                    }
                }
                Found::Counted { classification, count, .. } => {
                    self.found += count as usize;
                    *self.omitted.entry(classification).or_default() += count;
                }
            }
        }
        true
    }
}

pub(super) fn kind_of(classification: Classification, flags: &[SecurityFlag]) -> usize {
    let classification = match classification {
        Classification::Compatible => 0,
        Classification::Warning => 1,
        Classification::Breaking => 2,
    };
    let worst = flags.iter().map(|flag| flag.severity).max().map_or(0, |severity| match severity {
        Severity::Low => 1,
        Severity::Medium => 2,
        Severity::High => 3,
    });
    classification * 4 + worst
}

pub(super) fn text_len(value: &Value) -> usize {
    value.as_str().map_or(0, str::len)
}
