//! What memory holds after a start, a failed batch or a change of the consumer group: state, positions and
//! settings read back from the store, and the recent call identities where the worker remembers them.

use std::collections::{BTreeSet, HashMap};

use driftline_bus::Consumer;
use driftline_schemas::{DetectorThresholds, ProjectName, ServerKey, Timestamp, ToolKey};
use driftline_store::{DetectorState, RepeatLookup, Resume, Streams};

use crate::events::{Emit, PartitionsChanged, QuarantinedKeys, RepeatMemoryMeasured};
use crate::rollups::ROLLUP_MARK;
use crate::{repeats, ToolState, Worker, WorkerError, SETTINGS_REFRESH};

/// Every project's stored settings; a row whose project is not a valid name (written by hand) is skipped.
pub(crate) fn project_settings(
    rows: Vec<(String, DetectorThresholds)>,
) -> HashMap<ProjectName, DetectorThresholds> {
    rows.into_iter()
        .filter_map(|(project, thresholds)| match ProjectName::parse(project) {
            Ok(project) => Some((project, thresholds)),
            Err(err) => {
                tracing::warn!(error = %err, "stored thresholds of an invalid project name ignored");
                None
            }
        })
        .collect()
}

impl<C: Consumer> Worker<C> {
    /// Replaces everything held in memory with what the store holds for the streams this worker reads, and
    /// reads the bus from there again. After a failed batch this undoes what processing it did, so no
    /// record counts twice.
    pub(crate) async fn reload(&mut self) -> Result<(), WorkerError> {
        // A write still running must land (or fail) before the store is read, or memory would start behind
        // what the store ends up holding.
        if let Some(in_flight) = self.in_flight.take() {
            let _ = in_flight.write.await;
        }
        let owned = self.consumer.owned();
        let streams = owned.as_deref().map_or(Streams::All, Streams::Only);
        let resume = self.store.resume(streams).await?;
        self.servers.clear();
        self.list_texts.retain(|_| false);
        self.tools.clear();
        self.positions.clear();
        self.quarantined.clear();
        self.rollups.clear();
        self.rollup_marks.clear();
        self.dead_letter_counts.clear();
        // The bus is read again from the stored positions: what was carried comes again.
        self.carried.clear();
        self.restore(resume)?;
        self.recent.clear();
        self.load_recent(streams).await?;
        self.backfill_rollups().await?;
        self.consumer.rewind(&self.positions).await?;
        self.stale = false;
        tracing::info!(positions = ?self.positions, servers = self.servers.len(), tools = self.tools.len(), "detector state restored");
        Ok(())
    }

    /// Where the worker remembers recent calls ([`RepeatLookup::Remember`]): loads those of `streams`
    /// received within the repeat window (by the wall clock: the bus's time of the newest stored call is
    /// not known yet), as many as memory holds.
    pub(crate) async fn load_recent(&mut self, streams: Streams<'_>) -> Result<(), WorkerError> {
        if self.store.repeat_lookup() != RepeatLookup::Remember {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let window = i64::from(self.settings.repeat_window_hours) * 3_600_000;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let Some(since) = Timestamp::from_millis(now.saturating_sub(window).max(0)) else { return Ok(()) };
        let mut rows = self.store.recent_identities(streams, since, self.recent.capacity()).await?;
        rows.sort_by_key(|(_, position, at)| (*at, position.partition, position.offset));
        let count = rows.len();
        for (identity, position, at) in rows {
            self.recent.remember(repeats::identity_key(&identity), position, at.as_millis());
        }
        self.report_recent();
        tracing::info!(
            identities = count,
            held = self.recent.len(),
            seconds = started.elapsed().as_secs_f64(),
            "recent call identities loaded"
        );
        Ok(())
    }

    /// The gauges of what [`Worker::recent`] holds, and the identities it let go early.
    pub(crate) fn report_recent(&mut self) {
        let evicted = self.recent.take_evicted();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let horizon = self.recent.oldest().map_or(0, |oldest| (now - oldest).max(0)) as f64 / 1e3;
        RepeatMemoryMeasured {
            held: self.recent.len(),
            capacity: self.recent.capacity(),
            evicted,
            horizon_seconds: horizon.min(f64::from(self.settings.repeat_window_hours) * 3600.0),
            lines: &mut self.dead_letter_lines,
        }
        .emit();
    }

    /// Adds stored state, positions and settings to what memory holds.
    pub(crate) fn restore(&mut self, resume: Resume) -> Result<(), WorkerError> {
        for DetectorState { kind, key, stream, state } in resume.states {
            let read = match kind.as_str() {
                "server" => ServerKey::parse(&key).map_err(|err| err.to_string()).and_then(|parsed| {
                    let state = serde_json::from_str(&state).map_err(|err| err.to_string())?;
                    self.servers.restore(parsed, state, stream);
                    Ok(())
                }),
                "tool" => ToolKey::parse(&key).map_err(|err| err.to_string()).and_then(|parsed| {
                    let state: ToolState = serde_json::from_str(&state).map_err(|err| err.to_string())?;
                    self.tools.restore(parsed, state, stream);
                    Ok(())
                }),
                ROLLUP_MARK => state.parse::<u64>().map_err(|err| err.to_string()).map(|offset| {
                    self.rollup_marks.insert(stream, offset);
                }),
                driftline_store::DEAD_LETTER_STATE => self.dead_letter_counts.restore(&key, stream, &state),
                _ => Ok(()),
            };
            // One unreadable row must not stop every key: that key is quarantined, the rest resume.
            if let Err(err) = read {
                tracing::error!(%key, %kind, error = %err, "detector state unreadable: key quarantined, its records go to dead letters");
                self.quarantined.insert(key, format!("its stored {kind} state cannot be read ({err})"));
            }
        }
        QuarantinedKeys(self.quarantined.len()).emit();
        self.keys_held.recount(self.servers.keys(), self.tools.keys());
        self.thresholds = project_settings(resume.settings);
        self.settings_read_at = std::time::Instant::now();
        self.positions.extend(resume.positions);
        Ok(())
    }

    /// Follows the consumer group: forgets the state of streams moved away, loads that of streams moved here.
    pub(crate) async fn rebalance(&mut self) -> Result<(), WorkerError> {
        let Some(change) = self.consumer.take_rebalance() else {
            if self.consumer.owned().is_some() && self.settings_read_at.elapsed() >= SETTINGS_REFRESH {
                // Settings this worker changed in the batch in flight must be stored before they are read.
                self.finish_in_flight().await?;
                let resume = self.store.resume(Streams::Only(&[])).await?;
                self.thresholds = project_settings(resume.settings);
                self.settings_read_at = std::time::Instant::now();
            }
            return Ok(());
        };
        let owned = self.consumer.owned().map_or(0, |owned| owned.len());
        PartitionsChanged { assigned: &change.assigned, revoked: &change.revoked, owned }.emit();
        // The batch in flight holds records of the partitions moved away: it is stored before they go.
        // (Should it fail, the change is not lost: the reload that follows reads what is owned now.)
        self.finish_in_flight().await?;
        // Rows of partitions moved away may be written by their new owner from now on.
        self.rollups.clear();
        let revoked: BTreeSet<u32> = change.revoked.iter().copied().collect();
        let servers = &self.servers;
        self.list_texts.retain(|key| servers.stream(key).is_none_or(|s| !revoked.contains(&s)));
        self.servers.retain_streams(|s| !revoked.contains(&s));
        self.tools.retain_streams(|s| !revoked.contains(&s));
        self.positions.retain(|s, _| !revoked.contains(s));
        self.rollup_marks.retain(|s, _| !revoked.contains(s));
        self.dead_letter_counts.retain_streams(|s| !revoked.contains(&s));
        self.carried.retain(|r| !revoked.contains(&r.position.partition));
        self.recent.retain_streams(|s| !revoked.contains(&s));
        let resume = self.store.resume(Streams::Only(&change.assigned)).await?;
        self.restore(resume)?;
        self.load_recent(Streams::Only(&change.assigned)).await?;
        self.backfill_rollups().await?;
        tracing::info!(assigned = ?change.assigned, revoked = ?change.revoked, servers = self.servers.len(), tools = self.tools.len(), "detector partitions rebalanced");
        Ok(())
    }
}
