//! Rollup rows kept in step with the calls: folded per batch, and rebuilt from stored calls for a stream
//! read by a driftline without rollups.

use std::collections::BTreeMap;

use driftline_bus::Consumer;
use driftline_schemas::ToolKey;
use driftline_store::{Batch, DetectorState, StoreError};

use crate::events::{Emit, RollupRowsLoaded, RollupsBackfilled};
use crate::{Worker, WorkerError};

/// The state row that says up to where a stream's calls are in rollups.
pub(crate) const ROLLUP_MARK: &str = "rollups";

pub(crate) fn rollup_mark(stream: u32, offset: u64) -> DetectorState {
    DetectorState { kind: ROLLUP_MARK.to_owned(), key: stream.to_string(), stream, state: offset.to_string() }
}

impl<C: Consumer> Worker<C> {
    /// Streams this detector resumed whose stored position is past the calls in rollups (an older version,
    /// or one beside this during a rolling upgrade, read them): rebuilds their rollup rows from the stored
    /// calls, each included up to the stream's stored position, and marks the streams, in one batch, before
    /// reading on. A rebuilt row holds every stored call, so it never has fewer than the row it replaces.
    pub(crate) async fn backfill_rollups(&mut self) -> Result<(), WorkerError> {
        let pending: BTreeMap<u32, u64> = self
            .positions
            .iter()
            .filter(|(stream, offset)| self.rollup_marks.get(stream).is_none_or(|mark| mark < offset))
            .map(|(s, o)| (*s, *o))
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        let tools: Vec<(ToolKey, driftline_schemas::InputPosition)> = self
            .tools
            .streams()
            .filter_map(|(key, stream)| {
                let offset = *pending.get(&stream)?;
                Some((key.clone(), driftline_schemas::InputPosition { partition: stream, offset }))
            })
            .collect();
        let started = std::time::Instant::now();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let rows = self.store.backfill_rollups(&tools, driftline_store::rollup::Backfill::new(now)).await?;
        let count = rows.len();
        let batch = Batch {
            rollups: rows,
            states: pending.iter().map(|(s, o)| rollup_mark(*s, *o)).collect(),
            ..Default::default()
        };
        self.store.apply(batch).await?;
        let streams = pending.keys().collect::<Vec<_>>();
        let seconds = started.elapsed().as_secs_f64();
        RollupsBackfilled { streams: &streams, tools: tools.len(), rows: count, seconds }.emit();
        self.rollup_marks.extend(pending);
        Ok(())
    }

    /// Folds the batch's calls into their rollup rows (read from the store first where memory has none),
    /// adding the changed rows, whole, to the batch.
    pub(crate) async fn fold_rollups(&mut self, batch: &mut Batch) -> Result<(), WorkerError> {
        let missing = self.rollups.missing(batch.calls.iter().map(|stored| &stored.call));
        if !missing.is_empty() {
            let found = self.store.rollups(&missing).await?;
            RollupRowsLoaded { asked: missing.len(), found: found.len() }.emit();
            self.rollups.hold(missing, found);
        }
        let changed = self
            .rollups
            .fold(batch.calls.iter().map(|stored| (&stored.call, stored.position)))
            .map_err(|err| WorkerError::Store(StoreError::Corrupt(err.to_string())))?;
        tracing::debug!(rows = changed.len(), calls = batch.calls.len(), "rollup rows folded");
        batch.rollups = changed;
        Ok(())
    }
}
