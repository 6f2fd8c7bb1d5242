//! Dead letters counted per project and kind of refusal, kept as detector state (kind
//! [`DEAD_LETTER_STATE`], key `project/kind/stream`) and written with the batch that refused them: the
//! counts are stored exactly when the positions that skip the records are, and move with their stream in
//! a consumer group. The API sums a project's rows (`GET /api/health/dead-letters`).

use std::collections::{BTreeMap, BTreeSet};

use driftline_bus::{Delivered, Message, Topic};
use driftline_schemas::api::DeadLetterCount;
use driftline_schemas::{DeadLetter, ProjectName};
use driftline_store::{DetectorState, DEAD_LETTER_STATE};

use crate::refusal::{Refusal, RefusalKind};

/// Rows held at most (projects × kinds × streams): records of projects beyond it are counted only in the
/// metric, so made-up project names on the bus cannot grow this without bound.
const MAX_ROWS: usize = 10_000;
/// Characters of the newest reason kept per row.
const REASON_CHARS: usize = 300;

type Row = (ProjectName, RefusalKind, u32);

#[derive(Debug, Default)]
pub struct DeadLetterCounts {
    rows: BTreeMap<Row, DeadLetterCount>,
    changed: BTreeSet<Row>,
}

impl DeadLetterCounts {
    /// Counts a refused record under the project its key names (`project[/server[/tool]]`).
    pub fn add(&mut self, record: &Delivered, refusal: &Refusal) {
        let project = record.key.split('/').next().unwrap_or_default();
        let Ok(project) = ProjectName::parse(project) else { return };
        let row = (project, refusal.kind, record.position.partition);
        let reason: String = refusal.reason.chars().take(REASON_CHARS).collect();
        let full = self.rows.len() >= MAX_ROWS;
        match self.rows.get_mut(&row) {
            Some(count) => {
                count.count += 1;
                count.last_at = count.last_at.max(record.appended_at);
                count.last_reason = reason;
            }
            None if full => return,
            None => {
                let count = DeadLetterCount {
                    kind: refusal.kind.as_str().to_owned(),
                    count: 1,
                    last_at: record.appended_at,
                    last_reason: reason,
                };
                self.rows.insert(row.clone(), count);
            }
        }
        self.changed.insert(row);
    }

    /// A stored row (`Err` when it does not read back).
    pub fn restore(&mut self, key: &str, stream: u32, state: &str) -> Result<(), String> {
        let mut parts = key.splitn(3, '/');
        let (Some(project), Some(kind)) = (parts.next(), parts.next()) else {
            return Err(format!("dead-letter count key {key:?} is not project/kind/stream"));
        };
        let project = ProjectName::parse(project).map_err(|err| err.to_string())?;
        let kind = RefusalKind::parse(kind).ok_or_else(|| format!("no refusal kind {kind:?}"))?;
        let count: DeadLetterCount = serde_json::from_str(state).map_err(|err| err.to_string())?;
        self.rows.insert((project, kind, stream), count);
        Ok(())
    }

    /// Keeps the rows of the streams this worker still reads.
    pub fn retain_streams(&mut self, keep: impl Fn(u32) -> bool) {
        self.rows.retain(|(_, _, stream), _| keep(*stream));
        self.changed.retain(|(_, _, stream)| keep(*stream));
    }

    pub fn clear(&mut self) {
        self.rows.clear();
        self.changed.clear();
    }

    /// The rows changed since the last call, as state rows for the batch.
    pub fn take_changed(&mut self) -> Vec<DetectorState> {
        std::mem::take(&mut self.changed)
            .into_iter()
            .filter_map(|row| {
                let count = self.rows.get(&row)?;
                let (project, kind, stream) = row;
                Some(DetectorState {
                    kind: DEAD_LETTER_STATE.to_owned(),
                    key: format!("{project}/{}/{stream}", kind.as_str()),
                    stream,
                    // A struct of strings and numbers always serializes.
                    state: serde_json::to_string(count).unwrap_or_default(),
                })
            })
            .collect()
    }
}

/// The record a refused one becomes on the `dead-letters` topic: its source, its reason and its bytes.
pub(crate) fn dead_letter(record: &Delivered, reason: String) -> Message {
    let (payload, payload_hex) = match std::str::from_utf8(&record.payload) {
        Ok(text) => (Some(text.to_owned()), None),
        Err(_) => (None, Some(hex::encode(&record.payload))),
    };
    let letter = DeadLetter {
        schema_version: driftline_schemas::SCHEMA_VERSION,
        topic: record.topic.as_str().to_owned(),
        partition: record.position.partition & 0xffff,
        offset: record.position.offset,
        key: record.key.clone(),
        reason,
        payload,
        payload_hex,
        appended_at: record.appended_at,
    };
    Message {
        topic: Topic::DeadLetters,
        key: record.key.clone(),
        // A struct of strings and numbers always serializes.
        payload: serde_json::to_vec(&letter).unwrap_or_default(),
    }
}
