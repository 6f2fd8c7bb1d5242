//! Where detector outputs and state live, and the queries the API answers (DESIGN.md §7, §8).
//!
//! The worker hands over one [`Batch`] per run of input records: outputs, changed detector state, and the
//! input position they include. The store writes it atomically (or idempotently, by id), so a restart
//! resumes exactly after the last stored position and queries never see an event twice.

mod clickhouse;
pub mod retention;
pub mod rollup;
mod sqlite;
#[cfg(feature = "testing")]
pub mod testing;
mod views;

use std::collections::HashMap;

use async_trait::async_trait;
use driftline_bus::Positions;
use driftline_schemas::api::{
    CallBucket, DeadLetterCount, DriftImpact, RecentCall, ReturnValueStats, ServerHealth, SignalGroup,
    ToolSchema, ToolShape, ToolSummary,
};
use driftline_schemas::{
    DetectorThresholds, EventStatus, InputPosition, Notification, SchemaDriftEvent, ServerStatus,
    ShapeDriftSignal, ShapeOutcome, Timestamp, ToolCallRecord, ToolKey,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use clickhouse::{migrate as migrate_clickhouse, ClickHouseSettings, ClickHouseStore};
pub use driftline_detectors::tool_drift::BaselineAcceptance;
pub use sqlite::SqliteStore;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store database error: {0}")]
    Database(#[from] rusqlite::Error),
    #[error("store holds malformed data: {0}")]
    Corrupt(String),
    #[error("store is unavailable: {0}")]
    Unavailable(String),
    #[error("clickhouse refused: {0}")]
    ClickHouse(String),
    #[error("the store cannot answer this query: {0}")]
    Query(String),
}

impl From<rollup::SketchError> for StoreError {
    fn from(err: rollup::SketchError) -> Self {
        StoreError::Corrupt(err.to_string())
    }
}

impl From<serde_json::Error> for StoreError {
    fn from(err: serde_json::Error) -> Self {
        StoreError::Corrupt(err.to_string())
    }
}

/// The server row the health endpoints read.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerRow {
    pub project: String,
    pub server_name: String,
    pub status: ServerStatus,
    pub schema_hash: Option<String>,
    pub tool_count: u32,
    pub last_seen: Option<Timestamp>,
    pub note: Option<String>,
    /// The last probe's round trip, when the list came from a probe.
    pub latency_ms: Option<f64>,
    /// What the current list and instructions cost a model's context.
    pub context: Option<driftline_schemas::ContextCost>,
}

/// A tool's shape status as the worker last computed it (signal groups are read separately).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolShapeRow {
    pub project: String,
    pub shape: ToolShape,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EventUpdate {
    pub id: String,
    pub status: EventStatus,
    pub by: Option<String>,
    pub at: Timestamp,
}

/// A tool list shared by the detector's state, its events and the stored snapshot.
pub type SharedTools = std::sync::Arc<driftline_schemas::ToolsText>;

/// One captured list as stored: its tools replace the server's rows, and the snapshot keeps the list
/// with what the server declared besides its tools (instructions, prompts, resources).
#[derive(Debug, Clone)]
pub struct StoredToolList {
    pub project: String,
    pub server: String,
    pub captured_at: Timestamp,
    pub hash: String,
    pub tools: SharedTools,
    pub surfaces: Option<std::sync::Arc<driftline_schemas::ServerSurfaces>>,
}

/// A call as stored: its output id and the input record it came from.
#[derive(Debug, Clone)]
pub struct StoredCall {
    pub id: String,
    pub position: InputPosition,
    pub call: ToolCallRecord,
}

/// A call's identity (what tells a client's retry from a new call), the input record it came from and
/// when the bus received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallIdentity {
    pub identity: String,
    pub position: InputPosition,
    pub received_at: Timestamp,
}

/// A project's detector settings, as an admin set them.
#[derive(Debug, Clone, PartialEq)]
pub struct ProjectSettings {
    pub project: String,
    pub thresholds: DetectorThresholds,
}

/// An operator command a worker applied, with when and what it answered (the API waits for it).
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedCommand {
    pub id: String,
    pub at: Timestamp,
    pub result: Value,
}

/// Everything one run of the worker produced. Written in one transaction.
#[derive(Debug, Default)]
pub struct Batch {
    /// The last input offset of each partition these outputs include.
    pub positions: Positions,
    /// Changed detector state.
    pub states: Vec<DetectorState>,
    pub events: Vec<SchemaDriftEvent>,
    pub event_updates: Vec<EventUpdate>,
    pub acceptances: Vec<BaselineAcceptance>,
    pub servers: Vec<ServerRow>,
    pub tool_lists: Vec<StoredToolList>,
    pub calls: Vec<StoredCall>,
    /// Rollup rows the calls changed, whole (they replace what the store holds).
    pub rollups: Vec<rollup::Rollup>,
    /// The identity of every call stored.
    pub call_identities: Vec<CallIdentity>,
    pub signals: Vec<ShapeDriftSignal>,
    pub tool_shapes: Vec<ToolShapeRow>,
    /// Projects' settings an admin changed.
    pub settings: Vec<ProjectSettings>,
    pub applied_commands: Vec<AppliedCommand>,
    /// New drift events and DOWN/UP transitions, for the notifier.
    pub notifications: Vec<Notification>,
    /// Upcoming releases captured by the upstream watcher, diffed against their server's baseline.
    pub upcoming: Vec<driftline_schemas::UpcomingRelease>,
    /// Keys whose detector state is dropped (expired, or freed by an admin), with the rows that show it
    /// (a tool's shape view; a server's health row and current tools). History stays: events, signals,
    /// snapshots, calls. Applied after the batch's other rows; a key forgotten and then seen again in
    /// the same batch is not in it.
    pub forgotten: Vec<Forgotten>,
}

/// Most upcoming releases one read answers.
pub const UPCOMING_LIMIT: i64 = 200;

/// `detector_state`'s kind of the dead-letter counts: key `project/kind/stream`, state a
/// [`DeadLetterCount`] as JSON.
pub const DEAD_LETTER_STATE: &str = "dead_letters";

/// Reads stored dead-letter count rows of one project (rows that do not read are skipped: only a view).
pub fn dead_letter_counts(states: impl IntoIterator<Item = String>) -> Vec<DeadLetterCount> {
    DeadLetterCount::merge(states.into_iter().filter_map(|state| serde_json::from_str(&state).ok()))
}

/// How a worker finds the calls already stored that a new record repeats (a client's retry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepeatLookup {
    /// Ask the store per batch ([`DetectorStore::stored_calls`]): a B-tree lookup per identity, whose cost
    /// does not grow with what is stored (SQLite).
    Store,
    /// Remember the identities of each stream's calls within the repeat window, loaded with
    /// [`DetectorStore::recent_identities`] when the worker takes the stream: ClickHouse sorts data for
    /// ranges, and a batch of scattered identities read most of the table (its cost grew with every call
    /// stored in 30 days).
    Remember,
}

/// A key whose detector state a batch drops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forgotten {
    Server(driftline_schemas::ServerKey),
    Tool(ToolKey),
}

impl Forgotten {
    /// `detector_state`'s kind and key of it.
    pub fn state_key(&self) -> (&'static str, String) {
        match self {
            Forgotten::Server(key) => ("server", key.to_string()),
            Forgotten::Tool(key) => ("tool", key.to_string()),
        }
    }
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
            && self.states.is_empty()
            && self.applied_commands.is_empty()
            && self.forgotten.is_empty()
    }
}

/// One key's detector state, with the input stream (partition) whose records it includes: state moves
/// with its partition when a consumer group rebalances.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectorState {
    /// `server` (tool-list detector) or `tool` (shape detector).
    pub kind: String,
    pub key: String,
    pub stream: u32,
    /// JSON.
    pub state: String,
}

/// What a worker needs to resume: its positions and the detector state of the streams it reads, and every
/// project's settings.
#[derive(Debug, Default)]
pub struct Resume {
    pub positions: Positions,
    pub states: Vec<DetectorState>,
    pub settings: Vec<(String, DetectorThresholds)>,
}

/// Which input streams a worker resumes: all (the only reader), or those a consumer group assigned to it.
#[derive(Debug, Clone, Copy)]
pub enum Streams<'a> {
    All,
    Only(&'a [u32]),
}

impl Streams<'_> {
    pub fn contains(&self, stream: u32) -> bool {
        match self {
            Streams::All => true,
            Streams::Only(streams) => streams.contains(&stream),
        }
    }
}

/// Parameters of the impact query.
#[derive(Debug, Clone, Copy)]
pub struct ImpactQuery<'a> {
    pub project: &'a str,
    pub server: &'a str,
    pub tool: &'a str,
    pub hours: u32,
    pub now: Timestamp,
    /// Sessions at or above which an agent calling a tool with open breaking or warning changes is HIGH.
    pub high_risk_sessions: u64,
    /// The input schema observed calls are checked against: a candidate's (`driftline impact`), or `None`
    /// for the tool's in the server's current list.
    pub input_schema: Option<&'a Value>,
}

/// Parameters of a timeline: calls of one tool (or every tool of a server) started in `[from, to)`, in
/// buckets of `bucket_ms` aligned to `from`. Made only by [`BucketQuery::new`], which refuses buckets a
/// store cannot answer: both `from` and the bucket size are whole minutes (read from minute rollups) or
/// whole hours (hour rollups), the window is not empty, and it holds at most [`MAX_BUCKETS`] buckets.
#[derive(Debug, Clone, Copy)]
pub struct BucketQuery<'a> {
    pub project: &'a str,
    pub server: &'a str,
    pub tool: Option<&'a str>,
    pub(crate) from: Timestamp,
    pub(crate) to: Timestamp,
    pub(crate) bucket_ms: i64,
    /// The rollup rows it reads: `rollup::HOUR_MS` or `rollup::MINUTE_MS`.
    pub(crate) granularity_ms: i64,
}

/// The most buckets one timeline asks for (the API allows 1,440).
pub const MAX_BUCKETS: usize = 100_000;

impl<'a> BucketQuery<'a> {
    pub fn new(
        project: &'a str,
        server: &'a str,
        tool: Option<&'a str>,
        from: Timestamp,
        to: Timestamp,
        bucket_ms: i64,
    ) -> Result<Self, StoreError> {
        let granularity_ms = rollup::timeline_granularity(from.as_millis(), bucket_ms).ok_or_else(|| {
            StoreError::Query(format!(
                "buckets of {bucket_ms} ms from {from} are not whole minutes aligned to the minute"
            ))
        })?;
        let query = BucketQuery { project, server, tool, from, to, bucket_ms, granularity_ms };
        if to <= from || query.len() > MAX_BUCKETS {
            return Err(StoreError::Query(format!(
                "a timeline from {from} to {to} in buckets of {bucket_ms} ms: the window must hold 1 to {MAX_BUCKETS} buckets"
            )));
        }
        Ok(query)
    }

    pub fn from(&self) -> Timestamp {
        self.from
    }

    pub fn to(&self) -> Timestamp {
        self.to
    }

    pub fn bucket_ms(&self) -> i64 {
        self.bucket_ms
    }

    /// How many buckets `[from, to)` holds.
    pub fn len(&self) -> usize {
        let span = (self.to.as_millis() - self.from.as_millis()).max(0);
        ((span + self.bucket_ms - 1) / self.bucket_ms.max(1)) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The detector worker's side: it writes batches and resumes from them, and looks up which calls are
/// stored already.
#[async_trait]
pub trait DetectorStore: Send + Sync {
    async fn apply(&self, batch: Batch) -> Result<(), StoreError>;
    async fn resume(&self, streams: Streams<'_>) -> Result<Resume, StoreError>;
    /// The rollup rows of these keys that the store holds (the others have no call yet).
    async fn rollups(&self, keys: &[rollup::RollupKey]) -> Result<Vec<rollup::Rollup>, StoreError>;
    /// Rollup rows rebuilt from the stored calls of these tools, each included up to the input position
    /// given (what the detector had stored), for a detector that starts keeping rollups over calls an older
    /// version stored. Reads calls received since `backfill.since_ms()` only.
    async fn backfill_rollups(
        &self,
        tools: &[(ToolKey, InputPosition)],
        backfill: rollup::Backfill,
    ) -> Result<Vec<rollup::Rollup>, StoreError>;
    /// Which of these call identities are stored (ingested at or after `since`), with the input record
    /// each came from. The identities are hashes that include the project (`ToolCallRecord::identity`).
    async fn stored_calls(
        &self,
        identities: &[String],
        since: Timestamp,
    ) -> Result<HashMap<String, InputPosition>, StoreError>;
    /// How the worker tells a call sent again ([`RepeatLookup`]).
    fn repeat_lookup(&self) -> RepeatLookup;
    /// The identities of the calls stored from these streams and received at or after `since`, newest
    /// first, at most `most_per_stream` of each stream: what a worker remembers when it takes a stream
    /// ([`RepeatLookup::Remember`]). Read by stream and time, never by scattered identities.
    async fn recent_identities(
        &self,
        streams: Streams<'_>,
        since: Timestamp,
        most_per_stream: usize,
    ) -> Result<Vec<(String, InputPosition, Timestamp)>, StoreError>;
    /// Makes every applied batch durable where the store defers that (SQLite syncs its log only at
    /// checkpoints): the bus may then drop the records those batches came from.
    async fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Removes the rows past their retention ([`retention`]) as of `now`, a bounded run per transaction,
    /// that the store does not expire itself (ClickHouse's tables carry TTLs by age, not the snapshots
    /// kept per server); answers how many.
    async fn expire(&self, _now: Timestamp) -> Result<u64, StoreError> {
        Ok(0)
    }
}

/// A tool's `inputSchema` in its server's current list (what observed calls are checked against).
pub(crate) async fn current_input_schema(
    store: &(impl QueryStore + ?Sized),
    project: &str,
    server: &str,
    tool: &str,
) -> Result<Option<Value>, StoreError> {
    let tools = store.tool_schemas(project, server).await?;
    Ok(tools.into_iter().find(|schema| schema.tool_name == tool).map(|schema| schema.input_schema))
}

/// The query API's side: every read takes the caller's project and sees nothing of another.
#[async_trait]
pub trait QueryStore: Send + Sync {
    async fn servers(&self, project: &str) -> Result<Vec<ServerHealth>, StoreError>;
    /// A server's drift events, newest first. Events carry their tool lists while the stored text of the
    /// events read so far stays within `list_bytes` (the newest always does); older ones come
    /// [`SchemaDriftEvent::without_lists`], so a history of large lists is not read into memory whole.
    async fn drift_history(
        &self,
        project: &str,
        server: &str,
        limit: u32,
        list_bytes: usize,
    ) -> Result<Vec<SchemaDriftEvent>, StoreError>;
    /// One drift event of a server, with its tool lists.
    async fn drift_event(
        &self,
        project: &str,
        server: &str,
        id: &str,
    ) -> Result<Option<SchemaDriftEvent>, StoreError>;
    async fn drift_impact(&self, query: ImpactQuery<'_>) -> Result<DriftImpact, StoreError>;
    async fn tool_schemas(&self, project: &str, server: &str) -> Result<Vec<ToolSchema>, StoreError>;
    /// What the server's newest snapshot declared besides its tools; `None` where no capture had any.
    async fn server_surfaces(
        &self,
        project: &str,
        server: &str,
    ) -> Result<Option<driftline_schemas::ServerSurfaces>, StoreError>;
    /// Upcoming releases, newest first (at most [`UPCOMING_LIMIT`]); of one server when `server` is given.
    async fn upcoming(
        &self,
        project: &str,
        server: Option<&str>,
    ) -> Result<Vec<driftline_schemas::UpcomingRelease>, StoreError>;
    async fn tools(&self, project: &str, hours: u32, now: Timestamp) -> Result<Vec<ToolSummary>, StoreError>;
    async fn tool_shape(
        &self,
        project: &str,
        server: &str,
        tool: &str,
    ) -> Result<Option<ToolShape>, StoreError>;
    async fn shape_drift(
        &self,
        project: &str,
        hours: u32,
        now: Timestamp,
    ) -> Result<Vec<SignalGroup>, StoreError>;
    async fn thresholds(&self, project: &str) -> Result<Option<DetectorThresholds>, StoreError>;
    /// The project's dead letters by kind (the detector keeps them as `dead_letters` state rows).
    async fn dead_letters(&self, project: &str) -> Result<Vec<DeadLetterCount>, StoreError>;
    async fn return_value_stats(
        &self,
        project: &str,
        hours: u32,
        now: Timestamp,
    ) -> Result<ReturnValueStats, StoreError>;
    /// Per bucket: calls, errors, latency percentiles and the dominant shape's share (timelines).
    async fn call_buckets(&self, query: BucketQuery<'_>) -> Result<Vec<CallBucket>, StoreError>;
    /// The drill-down into raw calls: a tool's calls received at or after `since`, newest first (by receipt,
    /// then start), at most `limit` (the only read of raw calls; every count comes from rollups).
    async fn recent_calls(
        &self,
        project: &str,
        server: &str,
        tool: &str,
        since: Timestamp,
        limit: u32,
    ) -> Result<Vec<RecentCall>, StoreError>;
    /// Shape signals of a server's tools (or one tool) detected at or after `from`, oldest first.
    async fn signals(
        &self,
        project: &str,
        server: &str,
        tool: Option<&str>,
        from: Timestamp,
    ) -> Result<Vec<ShapeDriftSignal>, StoreError>;
    /// The result of an operator command, once a worker has applied it.
    async fn command_result(&self, id: &str) -> Result<Option<Value>, StoreError>;
    /// Whether the store answers at all (readiness).
    async fn ping(&self) -> Result<(), StoreError>;
}

/// The notifier's side: notifications the worker wrote, and each webhook's record of them.
#[async_trait]
pub trait NotificationStore: Send + Sync {
    /// Notifications at or after `since` that `webhook` has no record of, oldest first.
    async fn pending_notifications(
        &self,
        webhook: &str,
        since: Timestamp,
        limit: usize,
    ) -> Result<Vec<Notification>, StoreError>;
    /// What became of a notification for `webhook`: `sent`, `failed` (gave up) or `dropped` (queue full).
    async fn record_notified(
        &self,
        webhook: &str,
        id: &str,
        outcome: &str,
        at: Timestamp,
    ) -> Result<(), StoreError>;
}

/// A shape outcome as stored (its wire name); anything else reads as `not_success`.
pub(crate) fn stored_outcome(name: &str) -> ShapeOutcome {
    ShapeOutcome::ALL.into_iter().find(|o| o.as_str() == name).unwrap_or(ShapeOutcome::NotSuccess)
}

/// A whole store, as a process opens it and hands each stage its side.
pub trait Store: DetectorStore + QueryStore + NotificationStore {}

impl<T: DetectorStore + QueryStore + NotificationStore> Store for T {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The buckets a query holds, or why it was refused (the reason's start).
    fn check(from_ms: i64, to_ms: i64, bucket_ms: i64, expected: Result<usize, &str>) {
        let at = |ms: i64| Timestamp::from_millis(ms).expect("a time");
        let made = BucketQuery::new("p", "s", None, at(from_ms), at(to_ms), bucket_ms);
        match (made, expected) {
            (Ok(query), Ok(buckets)) => assert_eq!(query.len(), buckets),
            (Err(StoreError::Query(reason)), Err(start)) => assert!(reason.starts_with(start), "{reason}"),
            (made, expected) => panic!("{from_ms}..{to_ms} by {bucket_ms}: {made:?}, expected {expected:?}"),
        }
    }

    #[test]
    fn a_bucket_query_holds_only_buckets_a_store_can_answer() {
        let (minute, hour) = (rollup::MINUTE_MS, rollup::HOUR_MS);
        check(0, hour, 10 * minute, Ok(6));
        check(hour, 4 * hour, hour, Ok(3));
        check(0, hour + 1, 10 * minute, Ok(7));
        check(0, hour, 90_000, Err("buckets of 90000 ms"));
        check(30_000, hour, minute, Err("buckets of 60000 ms"));
        check(0, hour, 0, Err("buckets of 0 ms"));
        check(0, hour, -minute, Err("buckets of -60000 ms"));
        check(hour, hour, minute, Err("a timeline from"));
        check(hour, 0, minute, Err("a timeline from"));
        check(0, (MAX_BUCKETS as i64 + 1) * minute, minute, Err("a timeline from"));
    }
}
