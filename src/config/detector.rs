//! `[detector]`: the defaults of every project's thresholds and the worker's own settings.

use driftline_detectors::tool_drift::BaselinePolicy;
use driftline_schemas::{DetectorThresholds, SecurityHold};
use serde::Deserialize;

use super::{within, ConfigError};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DetectorConfig {
    /// Defaults for projects that never changed their thresholds through the API.
    pub min_history_calls: u32,
    pub history_window: u32,
    pub tool_return_value_max_bytes: u32,
    /// Default for projects that never set theirs: `compatible` (a new tool list whose changes are all
    /// COMPATIBLE becomes the baseline at once), `manual` (an operator accepts each), or `auto`.
    pub baseline: BaselinePolicy,
    /// Default for projects that never set theirs: the least security-flag severity that holds a tool-list
    /// change for a person (`medium`, or `high`; never lower).
    pub security_hold: SecurityHold,
    /// Default for projects that never set theirs: keep the shapes of the arguments calls send (never a
    /// value), to check observed calls against a new input schema.
    pub argument_shapes: bool,
    /// Default for projects that never set theirs: a new tool list costing a model's context more than
    /// this many tokens (or this percent) beyond its baseline is a WARNING change, `context_cost_grew`.
    /// 0: off (the default; every drift event still shows the growth). [0, 10000000] and [0, 10000].
    pub context_growth_tokens: u32,
    pub context_growth_percent: u32,
    /// Sessions at which an agent calling a tool with open breaking or warning drift is HIGH risk.
    pub high_risk_sessions: u64,
    /// A tool call sent again (same project, server, tool, trace and span id) within this many hours of
    /// the first is acknowledged and counted once. [1, 720]
    pub repeat_window_hours: u32,
    /// Memory for the identities of recent calls, where the detector remembers them (the ClickHouse store:
    /// at most 128 bytes a call); beyond it the oldest leave before their window ends, and a retry of one is
    /// counted again (`driftline_worker_repeat_identities_evicted_total`). [1048576, 1099511627776]
    pub repeat_memory_bytes: usize,
    /// Records the detector reads into one batch at most: a batch takes what the bus has ready, so under
    /// light load batches stay small (low latency) and on a backlog each store write carries many records.
    /// [1, 100000]
    pub max_batch_records: usize,
    /// Once a batch has processed for this long, the rest of its tool-list streams waits for the next one
    /// (calls and commands are always taken), so batches are stored, and lag gauges move, at least this
    /// often, and calls on other streams wait for no more list work than this. [10, 600000]
    pub max_batch_millis: u64,
    /// A tool without a call for this long (by the bus's clock) releases its detector state and its place
    /// in its project's limits; its next call starts a new baseline. [60, 31536000], 30 days by default.
    pub forget_unseen_tools_after_seconds: u64,
    /// For tests only: the detector pauses this long after each stored batch, to be slower than its
    /// input (the consumer-lag tests). 0 in any real deployment. [0, 10000]
    pub test_batch_pause_ms: u64,
    /// For tests only: the detector worker stops after this many batches, as a crashed one would (the
    /// process then reports not ready and exits non-zero). 0: never.
    pub test_stop_after_batches: u64,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        let t = DetectorThresholds::default();
        DetectorConfig {
            min_history_calls: t.min_history_calls,
            history_window: t.history_window,
            tool_return_value_max_bytes: t.tool_return_value_max_bytes,
            baseline: BaselinePolicy::default(),
            security_hold: SecurityHold::default(),
            argument_shapes: t.argument_shapes,
            context_growth_tokens: t.context_growth_tokens,
            context_growth_percent: t.context_growth_percent,
            high_risk_sessions: 10,
            repeat_window_hours: 24,
            repeat_memory_bytes: 256 << 20,
            max_batch_records: 20_000,
            forget_unseen_tools_after_seconds: 30 * 24 * 3600,
            max_batch_millis: 1000,
            test_batch_pause_ms: 0,
            test_stop_after_batches: 0,
        }
    }
}

impl DetectorConfig {
    pub fn thresholds(&self) -> DetectorThresholds {
        DetectorThresholds {
            min_history_calls: self.min_history_calls,
            history_window: self.history_window,
            tool_return_value_max_bytes: self.tool_return_value_max_bytes,
            baseline: self.baseline,
            security_hold: self.security_hold,
            argument_shapes: self.argument_shapes,
            context_growth_tokens: self.context_growth_tokens,
            context_growth_percent: self.context_growth_percent,
        }
    }
}

impl DetectorConfig {
    /// Checks the section; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.thresholds().validate().map_err(|err| ConfigError::Invalid(format!("detector.{err}")))?;
        within("detector.repeat_window_hours", self.repeat_window_hours, 1..=720)?;
        within("detector.repeat_memory_bytes", self.repeat_memory_bytes, 1 << 20..=1 << 40)?;
        within("detector.max_batch_millis", self.max_batch_millis, 10..=600_000)?;
        within(
            "detector.forget_unseen_tools_after_seconds",
            self.forget_unseen_tools_after_seconds,
            60..=31_536_000,
        )?;
        within("detector.max_batch_records", self.max_batch_records, 1..=100_000)?;
        within("detector.test_batch_pause_ms", self.test_batch_pause_ms, 0..=10_000)?;
        Ok(())
    }
}
