//! Rollups: what the API reads of traffic, kept up to date as calls are stored, so that no read scans
//! raw calls (at a billion calls a day, raw rows are tens of billions).
//!
//! A row sums the calls of one tool (or of one agent on one tool) in one minute or one hour: calls,
//! errors, latency (sum and a [`LatencySketch`]), the latest call, shape outcomes and shapes (tool rows),
//! distinct sessions (agent rows). A call's time is when it started, or when driftline received it if the
//! client's clock says later; a call received more than [`MAX_CALL_AGE_MS`] after it started is in no
//! window and in no rollup.
//!
//! **Exactly once.** All calls of a tool travel one input partition, in order, and one detector writes
//! them. Each row records the last input position folded into it (`through`), and the detector writes
//! whole rows (never increments) in the same batch as the calls, before the positions. A call at or
//! before a row's `through` on the same partition is in the row already and is skipped, so a batch
//! replayed after a crash (whose rows may be stored while its positions are not) counts nothing twice,
//! however the replay is split into batches. The detector keeps the rows it wrote in a [`RollupCache`]
//! and reads the others from the store before folding.

mod arguments;
mod read;
mod sketch;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};

use driftline_schemas::{CallStatus, InputPosition, ShapeOutcome, ToolCallRecord};

pub use arguments::ArgumentShapes;
pub(crate) use read::{
    agent_stats, bucket_aggregates, outcome_rows, AgentRow, AgentStats, BucketAggregate, BucketRow,
};
pub use sketch::{
    session_hash, LatencyMerge, LatencySketch, SessionSketch, ShapeCounts, SketchError, LATENCY_ACCURACY,
};

pub const MINUTE_MS: i64 = 60_000;
pub const HOUR_MS: i64 = 3_600_000;
/// Windows up to this long start on a minute; longer ones start on an hour (minute rows are kept
/// [`MINUTE_RETENTION_HOURS`], hour rows 31 days).
pub const MINUTE_WINDOW_HOURS: u32 = 48;
pub const MINUTE_RETENTION_HOURS: u32 = 72;
/// Every window is at most 720 hours: a call that reaches driftline later than this after it started
/// would be in none.
pub const MAX_CALL_AGE_MS: i64 = 31 * 24 * HOUR_MS;

/// One rollup row's identity.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RollupKey {
    pub project: String,
    pub server: String,
    pub tool: String,
    /// `None`: the tool's row (every agent); `Some`: one agent's row (`unknown` for calls without one).
    pub agent: Option<String>,
    /// [`MINUTE_MS`] or [`HOUR_MS`].
    pub granularity_ms: i64,
    /// The bucket's start (Unix ms), a multiple of the granularity.
    pub bucket_ms: i64,
}

/// The agent name impact reports for calls that carry none.
pub const UNKNOWN_AGENT: &str = "unknown";

/// One rollup row: everything the API reads about the calls of its bucket.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rollup {
    pub key: RollupKey,
    /// The last input record folded in (`None` only for a row not stored yet).
    pub through: Option<InputPosition>,
    pub calls: u64,
    pub errors: u64,
    pub duration_sum_ms: f64,
    /// The latest call time (Unix ms).
    pub last_call_ms: i64,
    /// Tool rows: calls per shape outcome, in [`ShapeOutcome::ALL`] order.
    pub outcomes: [u64; 7],
    /// Tool rows: durations.
    pub latency: LatencySketch,
    /// Tool rows: the shapes of fingerprinted returns.
    pub shapes: ShapeCounts,
    /// Agent rows: distinct session ids.
    pub sessions: SessionSketch,
    /// Agent rows: the shapes of the arguments the calls sent (when their spans recorded them).
    pub arguments: ArgumentShapes,
}

/// What a rollup keeps of a call (from a record, or from a stored row when rollups are rebuilt).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallFacts<'a> {
    pub project: &'a str,
    pub server: &'a str,
    pub tool: &'a str,
    pub agent: Option<&'a str>,
    pub session: Option<&'a str>,
    pub started_ms: i64,
    pub ingested_ms: i64,
    pub duration_ms: f64,
    pub error: bool,
    pub outcome: ShapeOutcome,
    pub shape_hash: Option<&'a str>,
    /// The shape of the arguments sent, when the span recorded them (stored calls rebuilt into rollups
    /// have none: raw calls do not keep it).
    pub argument_shape: Option<&'a str>,
}

impl<'a> From<&'a ToolCallRecord> for CallFacts<'a> {
    fn from(call: &'a ToolCallRecord) -> Self {
        CallFacts {
            project: call.project.as_str(),
            server: call.server.as_str(),
            tool: call.tool.as_str(),
            agent: call.agent_name.as_deref(),
            session: call.session_id.as_deref(),
            started_ms: call.started_at.as_millis(),
            ingested_ms: call.ingested_at.as_millis(),
            duration_ms: call.duration_ms,
            error: call.status == CallStatus::Error,
            outcome: call.shape_outcome,
            shape_hash: call.shape_hash.as_deref(),
            argument_shape: call.argument_shape.as_deref(),
        }
    }
}

/// When a call counts: when it started, but never after driftline received it (a client clock ahead);
/// `None` for a call received so long after it started that no window reaches it.
pub fn call_time(call: &CallFacts<'_>) -> Option<i64> {
    let at = call.started_ms.min(call.ingested_ms);
    (call.ingested_ms - at <= MAX_CALL_AGE_MS).then_some(at)
}

/// The four rows a call is folded into: its tool's and its agent's, per minute and per hour.
pub fn keys_of(call: &CallFacts<'_>) -> Vec<RollupKey> {
    let Some(at) = call_time(call) else { return Vec::new() };
    let agent = call.agent.unwrap_or(UNKNOWN_AGENT);
    let mut keys = Vec::with_capacity(4);
    for granularity_ms in [MINUTE_MS, HOUR_MS] {
        for agent in [None, Some(agent.to_owned())] {
            keys.push(RollupKey {
                project: call.project.to_owned(),
                server: call.server.to_owned(),
                tool: call.tool.to_owned(),
                agent,
                granularity_ms,
                bucket_ms: at.div_euclid(granularity_ms) * granularity_ms,
            });
        }
    }
    keys
}

fn outcome_index(outcome: ShapeOutcome) -> usize {
    ShapeOutcome::ALL.iter().position(|o| *o == outcome).unwrap_or(ShapeOutcome::ALL.len() - 1)
}

impl Rollup {
    pub fn empty(key: RollupKey) -> Self {
        Rollup { key, last_call_ms: i64::MIN, ..Default::default() }
    }

    /// Whether the row includes the record at `position` already.
    pub fn includes(&self, position: InputPosition) -> bool {
        self.through.is_some_and(|through| {
            through.partition == position.partition && position.offset <= through.offset
        })
    }

    /// Adds one call (of this row's key) unless the row includes it already; whether it added it.
    pub fn fold(&mut self, call: &CallFacts<'_>, at_ms: i64, position: InputPosition) -> bool {
        if self.includes(position) {
            return false;
        }
        self.through = Some(position);
        self.add(call, at_ms);
        true
    }

    /// Adds one call (of this row's key), whatever the row includes.
    fn add(&mut self, call: &CallFacts<'_>, at_ms: i64) {
        self.calls += 1;
        self.errors += u64::from(call.error);
        self.duration_sum_ms += call.duration_ms;
        self.last_call_ms = self.last_call_ms.max(at_ms);
        if self.key.agent.is_some() {
            if let Some(session) = call.session {
                self.sessions.insert(session_hash(session), SessionSketch::STORED_EXACT_LIMIT);
            }
            if let Some(shape) = call.argument_shape {
                self.arguments.insert(shape);
            }
        } else {
            self.outcomes[outcome_index(call.outcome)] += 1;
            self.latency.insert(call.duration_ms);
            if let (ShapeOutcome::Fingerprinted, Some(hash)) = (call.outcome, call.shape_hash) {
                self.shapes.insert(hash);
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("rollup row {0:?} was not loaded before folding")]
pub struct NotLoaded(pub RollupKey);

/// The rollup rows a detector holds: those it wrote since it last loaded its state, and those it read.
/// Only a cache: correctness comes from each row's `through`, and anything forgotten is read again.
#[derive(Debug)]
pub struct RollupCache {
    rows: HashMap<RollupKey, Rollup>,
    limit: usize,
}

impl Default for RollupCache {
    fn default() -> Self {
        RollupCache::new(RollupCache::DEFAULT_LIMIT)
    }
}

impl RollupCache {
    /// Rows held between batches; a batch touching more holds its own until it is stored.
    pub const DEFAULT_LIMIT: usize = 20_000;

    pub fn new(limit: usize) -> Self {
        RollupCache { rows: HashMap::new(), limit }
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows these calls fold into that are not held: to be read from the store first.
    pub fn missing<'a>(&self, calls: impl IntoIterator<Item = &'a ToolCallRecord>) -> Vec<RollupKey> {
        let mut missing = HashSet::new();
        for call in calls {
            for key in keys_of(&call.into()) {
                if !self.rows.contains_key(&key) {
                    missing.insert(key);
                }
            }
        }
        let mut missing: Vec<RollupKey> = missing.into_iter().collect();
        missing.sort();
        missing
    }

    /// What the store answered for `asked`: the rows it holds, and empty rows for the others.
    pub fn hold(&mut self, asked: Vec<RollupKey>, found: Vec<Rollup>) {
        for row in found {
            self.rows.insert(row.key.clone(), row);
        }
        for key in asked {
            self.rows.entry(key.clone()).or_insert_with(|| Rollup::empty(key));
        }
    }

    /// Folds calls, in input order, into the rows held; returns the rows that changed, whole, in key
    /// order. Every row must be held (see [`RollupCache::missing`]).
    pub fn fold<'a>(
        &mut self,
        calls: impl IntoIterator<Item = (&'a ToolCallRecord, InputPosition)>,
    ) -> Result<Vec<Rollup>, NotLoaded> {
        let mut changed = BTreeMap::new();
        for (call, position) in calls {
            let call = CallFacts::from(call);
            let Some(at) = call_time(&call) else { continue };
            for key in keys_of(&call) {
                let row = self.rows.get_mut(&key).ok_or_else(|| NotLoaded(key.clone()))?;
                if row.fold(&call, at, position) {
                    changed.insert(key, ());
                }
            }
        }
        Ok(changed.into_keys().filter_map(|key| self.rows.get(&key).cloned()).collect())
    }

    /// Forgets everything (the store may hold other rows than memory: after a failed batch, a reload or
    /// a rebalance).
    pub fn clear(&mut self) {
        self.rows.clear();
    }

    /// After a stored batch: past the limit, keep only the rows it wrote (the live buckets).
    pub fn trim(&mut self, written: &[Rollup]) {
        if self.rows.len() <= self.limit {
            return;
        }
        let keep: HashSet<&RollupKey> = written.iter().map(|row| &row.key).collect();
        if keep.len() > self.limit {
            self.rows.clear();
        } else {
            self.rows.retain(|key, _| keep.contains(key));
        }
    }
}

/// Rollup rows rebuilt from stored calls, for a detector that starts keeping rollups over calls stored
/// before it did (an upgrade): every call counts, and each row includes its tool up to the position the
/// detector had stored. Only rows some window can still read are built: hour rows of the last 31 days,
/// minute rows of the last [`MINUTE_RETENTION_HOURS`].
#[derive(Debug)]
pub struct Backfill {
    rows: HashMap<RollupKey, Rollup>,
    hours_from_ms: i64,
    minutes_from_ms: i64,
}

impl Backfill {
    pub fn new(now_ms: i64) -> Self {
        Backfill {
            rows: HashMap::new(),
            hours_from_ms: now_ms - MAX_CALL_AGE_MS,
            minutes_from_ms: now_ms - i64::from(MINUTE_RETENTION_HOURS) * HOUR_MS,
        }
    }

    /// The oldest receipt time of a call that can count (older calls need not be read).
    pub fn since_ms(&self) -> i64 {
        self.hours_from_ms
    }

    pub fn add(&mut self, call: &CallFacts<'_>, through: InputPosition) {
        let Some(at) = call_time(call) else { return };
        for key in keys_of(call) {
            let from =
                if key.granularity_ms == MINUTE_MS { self.minutes_from_ms } else { self.hours_from_ms };
            if key.bucket_ms + key.granularity_ms <= from {
                continue;
            }
            let row = self.rows.entry(key.clone()).or_insert_with(|| Rollup::empty(key));
            row.through = Some(through);
            row.add(call, at);
        }
    }

    /// The rows, in key order.
    pub fn finish(self) -> Vec<Rollup> {
        let mut rows: Vec<Rollup> = self.rows.into_values().collect();
        rows.sort_by(|a, b| a.key.cmp(&b.key));
        rows
    }
}

/// Which rows make up "the last `hours` hours" at `now`: minute rows from `from_ms` up to `hours_from_ms`,
/// hour rows from `hours_from_ms` on. The window starts on the minute (on the hour beyond
/// [`MINUTE_WINDOW_HOURS`]) at or before `now - hours`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub from_ms: i64,
    pub hours_from_ms: i64,
}

pub fn window(now_ms: i64, hours: u32) -> Window {
    let start = now_ms - i64::from(hours) * HOUR_MS;
    let from_ms = if hours <= MINUTE_WINDOW_HOURS {
        start.div_euclid(MINUTE_MS) * MINUTE_MS
    } else {
        start.div_euclid(HOUR_MS) * HOUR_MS
    };
    let hours_from_ms = (from_ms + HOUR_MS - 1).div_euclid(HOUR_MS) * HOUR_MS;
    Window { from_ms, hours_from_ms }
}

/// The rows a timeline of `bucket_ms` buckets from `from_ms` reads: hour rows when its buckets are whole
/// hours, else minute rows; `None` when its buckets are not whole minutes.
pub fn timeline_granularity(from_ms: i64, bucket_ms: i64) -> Option<i64> {
    [HOUR_MS, MINUTE_MS].into_iter().find(|g| bucket_ms % g == 0 && from_ms % g == 0 && bucket_ms > 0)
}
