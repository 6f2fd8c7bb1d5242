//! What happens in the detector worker, one type each (Vector's internal events): emitting one writes its
//! log line and counts its metrics in one place, so neither is added without the other. Metrics are
//! counted nowhere else in the crate (the tidy test checks), and their label values are enums.

use std::collections::BTreeMap;
use std::time::Instant;

use driftline_bus::Delivered;
use driftline_bus::Positions;
use driftline_schemas::{Classification, LogBudget, SchemaDriftEvent, Severity, ShapeDriftSignal};

use crate::metrics;
use crate::refusal::Refusal;

/// Something that happened; `emit` logs it and counts it.
pub(crate) trait Emit {
    fn emit(self);
}

/// The `classification` label of `driftline_drift_events_total`.
fn classification_label(classification: Option<Classification>) -> &'static str {
    classification.map_or("none", Classification::as_str)
}

/// Where a rollup row came from: the `source` label of `driftline_worker_rollup_rows_total`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RollupSource {
    /// Folded from the batch's calls and written with it.
    Written,
    /// Read from the store on a cache miss.
    Loaded,
    /// Rebuilt from stored calls after an upgrade.
    Backfilled,
}

impl RollupSource {
    fn as_str(self) -> &'static str {
        match self {
            RollupSource::Written => "written",
            RollupSource::Loaded => "loaded",
            RollupSource::Backfilled => "backfilled",
        }
    }
}

/// What a state key names: the `kind` label of `driftline_detector_state_keys`.
#[derive(Debug, Clone, Copy)]
enum StateKind {
    Server,
    Tool,
}

impl StateKind {
    fn as_str(self) -> &'static str {
        match self {
            StateKind::Server => "server",
            StateKind::Tool => "tool",
        }
    }
}

pub(crate) struct BaselineEstablished<'a> {
    pub short_hash: &'a str,
    pub tool_count: usize,
    pub flags: usize,
    pub high: usize,
}

impl Emit for BaselineEstablished<'_> {
    fn emit(self) {
        let BaselineEstablished { short_hash, tool_count, flags, high } = self;
        tracing::info!(hash = %short_hash, tool_count, flags, high, "baseline established");
    }
}

pub(crate) struct DriftEventFound<'a>(pub &'a SchemaDriftEvent);

impl Emit for DriftEventFound<'_> {
    fn emit(self) {
        let event = self.0;
        tracing::info!(server = %event.server_name, id = %event.id, changes = event.changes.len(), max = ?event.max_classification, severity = ?event.max_severity, "tool-list drift");
        metrics::DRIFT_EVENTS.with_label_values(&[classification_label(event.max_classification)]).inc();
        if event.max_severity == Some(Severity::High) {
            metrics::HIGH_SEVERITY_EVENTS.inc();
        }
    }
}

pub(crate) struct ShapeDriftSignalled<'a> {
    pub key: &'a dyn std::fmt::Display,
    pub signal: &'a ShapeDriftSignal,
}

impl Emit for ShapeDriftSignalled<'_> {
    fn emit(self) {
        let (key, signal) = (self.key, self.signal);
        tracing::info!(key = %key, fingerprint = %signal.fingerprint, ranking = signal.ranking.as_str(), "return shape drift");
        metrics::SHAPE_SIGNALS.with_label_values(&[signal.ranking.as_str()]).inc();
    }
}

pub(crate) struct DeclaredOutputMismatched<'a> {
    pub key: &'a dyn std::fmt::Display,
    pub signal: &'a ShapeDriftSignal,
}

impl Emit for DeclaredOutputMismatched<'_> {
    fn emit(self) {
        let (key, signal) = (self.key, self.signal);
        let paths: Vec<String> = signal.reasons.iter().map(ToString::to_string).collect();
        tracing::info!(key = %key, fingerprint = %signal.fingerprint, declared = %signal.baseline_hash, reasons = ?paths, "returns mismatch the declared output");
        metrics::MISMATCH_SIGNALS.inc();
    }
}

pub(crate) struct CallRepeated<'a>(pub &'a Delivered);

impl Emit for CallRepeated<'_> {
    fn emit(self) {
        tracing::debug!(key = %self.0.key, offset = self.0.position.offset, "call sent again: counted once");
        metrics::REPEATED_CALLS.inc();
    }
}

/// A record the detector could not use. Its line is rate limited by `lines` (the metric counts every one;
/// a line says how many went without one before it).
pub(crate) struct RecordDeadLettered<'a> {
    pub record: &'a Delivered,
    pub refusal: &'a Refusal,
    pub lines: &'a mut LogBudget,
}

impl Emit for RecordDeadLettered<'_> {
    fn emit(self) {
        let RecordDeadLettered { record, refusal, lines } = self;
        metrics::DEAD_LETTERS.with_label_values(&[refusal.kind.as_str()]).inc();
        if let Some(suppressed) = lines.take(Instant::now()) {
            tracing::warn!(topic = record.topic.as_str(), key = %record.key, offset = record.position.offset, kind = refusal.kind.as_str(), reason = %refusal.reason, suppressed, "unusable record skipped");
        }
    }
}

pub(crate) struct RecordRead<'a>(pub &'a Delivered);

impl Emit for RecordRead<'_> {
    fn emit(self) {
        tracing::trace!(topic = self.0.topic.as_str(), offset = self.0.position.offset, "record read");
        metrics::RECORDS.with_label_values(&[self.0.topic.as_str()]).inc();
    }
}

pub(crate) struct UnseenToolsForgotten {
    pub tools: usize,
    pub unseen_for_seconds: u64,
}

impl Emit for UnseenToolsForgotten {
    fn emit(self) {
        let UnseenToolsForgotten { tools, unseen_for_seconds } = self;
        tracing::info!(tools, unseen_for_seconds, "tools unseen too long forgotten");
        metrics::FORGOTTEN_TOOLS.inc_by(tools as u64);
    }
}

/// How many keys are quarantined now (their stored state cannot be read).
pub(crate) struct QuarantinedKeys(pub usize);

impl Emit for QuarantinedKeys {
    fn emit(self) {
        tracing::debug!(keys = self.0, "quarantined keys");
        metrics::QUARANTINED_KEYS.set(self.0 as i64);
    }
}

pub(crate) struct StoredRowsExpired {
    pub rows: u64,
    pub elapsed_ms: u64,
}

impl Emit for StoredRowsExpired {
    fn emit(self) {
        let StoredRowsExpired { rows, elapsed_ms } = self;
        tracing::info!(rows, elapsed_ms, "stored rows past their retention removed");
        metrics::EXPIRED_ROWS.inc_by(rows);
    }
}

pub(crate) struct ExpiryFailed<'a>(pub &'a dyn std::fmt::Display);

impl Emit for ExpiryFailed<'_> {
    fn emit(self) {
        tracing::warn!(error = %self.0, "stored rows past their retention not removed; trying again later");
        metrics::EXPIRY_FAILURES.inc();
    }
}

pub(crate) struct BusRecordsReleased<'a> {
    pub records: u64,
    pub positions: &'a Positions,
}

impl Emit for BusRecordsReleased<'_> {
    fn emit(self) {
        tracing::debug!(records = self.records, positions = ?self.positions, "bus records released");
        metrics::RELEASED_RECORDS.inc_by(self.records);
    }
}

pub(crate) struct BusReleaseFailed<'a>(pub &'a dyn std::fmt::Display);

impl Emit for BusReleaseFailed<'_> {
    fn emit(self) {
        tracing::warn!(error = %self.0, "bus records not released; trying again later");
        metrics::RELEASE_FAILURES.inc();
    }
}

pub(crate) struct BatchStored {
    pub records: usize,
    pub rollup_rows: usize,
    pub seconds: f64,
    pub lag: u64,
    pub server_keys: usize,
    pub tool_keys: usize,
}

impl Emit for BatchStored {
    fn emit(self) {
        let BatchStored { records, rollup_rows, seconds, lag, server_keys, tool_keys } = self;
        tracing::debug!(records, rollup_rows, seconds, lag, server_keys, tool_keys, "batch stored");
        metrics::ROLLUP_ROWS.with_label_values(&[RollupSource::Written.as_str()]).inc_by(rollup_rows as u64);
        metrics::FLUSH_SECONDS.observe(seconds);
        metrics::BATCH_SIZE.observe(records as f64);
        metrics::STATE_KEYS.with_label_values(&[StateKind::Server.as_str()]).set(server_keys as i64);
        metrics::STATE_KEYS.with_label_values(&[StateKind::Tool.as_str()]).set(tool_keys as i64);
    }
}

/// The records not processed yet, per input partition this worker owns (`gone`: partitions it no longer
/// owns, whose series are removed).
pub(crate) struct LagMeasured<'a> {
    pub lags: &'a BTreeMap<String, u64>,
    pub gone: &'a [String],
}

impl Emit for LagMeasured<'_> {
    fn emit(self) {
        for gone in self.gone.iter().filter(|label| !self.lags.contains_key(*label)) {
            let _ = metrics::PARTITION_LAG.remove_label_values(&[gone.as_str()]);
        }
        for (partition, lag) in self.lags {
            metrics::PARTITION_LAG.with_label_values(&[partition.as_str()]).set(*lag as i64);
        }
        let total: u64 = self.lags.values().sum();
        tracing::trace!(lag = total, partitions = self.lags.len(), "lag measured");
        metrics::LAG.set(total as i64);
    }
}

/// The age of the oldest record not processed yet (0 when none waits).
pub(crate) struct OldestUnprocessed(pub f64);

impl Emit for OldestUnprocessed {
    fn emit(self) {
        tracing::trace!(seconds = self.0, "oldest unprocessed record");
        metrics::OLDEST_UNPROCESSED.set(self.0);
    }
}

pub(crate) struct BatchClosedEarly<'a> {
    pub processed: usize,
    pub carried: usize,
    pub streams: &'a dyn std::fmt::Debug,
}

impl Emit for BatchClosedEarly<'_> {
    fn emit(self) {
        let BatchClosedEarly { processed, carried, streams } = self;
        tracing::debug!(processed, carried, streams = ?streams, "batch closed at its time budget: tool-list streams carried over");
        metrics::CARRIED_RECORDS.inc_by(carried as u64);
    }
}

pub(crate) struct DeclarationsPublished(pub usize);

impl Emit for DeclarationsPublished {
    fn emit(self) {
        tracing::debug!(count = self.0, "output declarations published");
        metrics::DECLARATIONS.inc_by(self.0 as u64);
    }
}

pub(crate) struct BatchRetried<'a> {
    pub error: &'a dyn std::fmt::Display,
    pub retry_in_ms: u64,
}

impl Emit for BatchRetried<'_> {
    fn emit(self) {
        tracing::warn!(error = %self.error, retry_in_ms = self.retry_in_ms, "detector batch failed; retrying");
        metrics::RETRIES.inc();
    }
}

/// What the memory of recent call identities holds, and those it let go before their window ended (their
/// line is rate limited by `lines`).
pub(crate) struct RepeatMemoryMeasured<'a> {
    pub held: usize,
    pub capacity: usize,
    pub evicted: u64,
    pub horizon_seconds: f64,
    pub lines: &'a mut LogBudget,
}

impl Emit for RepeatMemoryMeasured<'_> {
    fn emit(self) {
        let RepeatMemoryMeasured { held, capacity, evicted, horizon_seconds, lines } = self;
        if evicted > 0 {
            metrics::REPEAT_EVICTED.inc_by(evicted);
            if let Some(suppressed) = lines.take(Instant::now()) {
                tracing::warn!(evicted, capacity, suppressed, "call identities left memory before their repeat window ended (detector.repeat_memory_bytes): a retry of one is counted again");
            }
        }
        tracing::trace!(held, horizon_seconds, "repeat memory measured");
        metrics::REPEAT_IDENTITIES.set(held as i64);
        metrics::REPEAT_HORIZON.set(horizon_seconds);
    }
}

pub(crate) struct PartitionsChanged<'a> {
    pub assigned: &'a [u32],
    pub revoked: &'a [u32],
    pub owned: usize,
}

impl Emit for PartitionsChanged<'_> {
    fn emit(self) {
        tracing::info!(assigned = ?self.assigned, revoked = ?self.revoked, owned = self.owned, "detector partitions changing");
        metrics::REBALANCES.inc();
        metrics::OWNED_PARTITIONS.set(self.owned as i64);
    }
}

pub(crate) struct RollupRowsLoaded {
    pub asked: usize,
    pub found: usize,
}

impl Emit for RollupRowsLoaded {
    fn emit(self) {
        tracing::debug!(asked = self.asked, found = self.found, "rollup rows loaded");
        metrics::ROLLUP_ROWS.with_label_values(&[RollupSource::Loaded.as_str()]).inc_by(self.found as u64);
    }
}

pub(crate) struct RollupsBackfilled<'a> {
    pub streams: &'a dyn std::fmt::Debug,
    pub tools: usize,
    pub rows: usize,
    pub seconds: f64,
}

impl Emit for RollupsBackfilled<'_> {
    fn emit(self) {
        let RollupsBackfilled { streams, tools, rows, seconds } = self;
        tracing::info!(streams = ?streams, tools, rows, seconds, "rollups rebuilt from stored calls");
        metrics::ROLLUP_ROWS.with_label_values(&[RollupSource::Backfilled.as_str()]).inc_by(rows as u64);
    }
}
