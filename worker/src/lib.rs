//! The detector worker: reads the bus in order, runs both detectors per key, and hands the store one
//! batch per poll — outputs, changed state, and the input position they include (DESIGN.md §9).
//!
//! This is glue at the edge: detection itself lives in `driftline-detectors` and knows nothing of the bus
//! or the store.

mod dead_letters;
pub mod expiry;
mod fair;
pub mod keys;
mod metrics;
pub mod refusal;
pub mod repeats;
pub mod tool_lists;

use keys::{KeyLimits, KeysHeld};
use refusal::{Refusal, RefusalKind};
use tool_lists::ListTexts;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use driftline_bus::{BusError, Consumer, Delivered, Message, Positions, Producer, Release, Topic};
use driftline_detectors::contract::{self, ToolContractState};
use driftline_detectors::shape::record_from_span;
use driftline_detectors::shape_drift::{self, ShapeStatus, ToolShapeState};
use driftline_detectors::tool_drift::{
    changed_declarations, declared_outputs, short_hash, Acceptance, DeclaredOutput, HashedTools,
    RecordContext, ServerState, ToolListOutput,
};
use driftline_schemas::api::{AcceptResult, ShapeState, ToolShape};
use driftline_schemas::{
    derive_id, DeadLetter, DetectorThresholds, Notification, NotificationKind, OperatorCommand,
    OutputDeclaration, OutputKind, ProbeFailure, ProjectName, ServerKey, ServerName, ServerStatus, Timestamp,
    ToolCallRecord, ToolCallSpan, ToolKey, ToolListRecord, ToolName, ToolsText, OUTPUT_DECLARATION,
};
use driftline_store::rollup::RollupCache;
use driftline_store::{
    Batch, DetectorState, DetectorStore, EventUpdate, Forgotten, RepeatLookup, Resume, ServerRow, StoreError,
    StoredToolList, Streams, ToolShapeRow,
};
use serde_json::json;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("detector state for {key} cannot be read: {reason}")]
    State { key: String, reason: String },
}

/// Settings the worker applies to every project unless the project changed them.
#[derive(Debug, Clone, Copy)]
pub struct WorkerSettings {
    /// Including the baseline policy (`thresholds.baseline`).
    pub thresholds: DetectorThresholds,
    /// How long a call sent again (same identity) is recognised and counted once.
    pub repeat_window_hours: u32,
    /// Memory for the identities of recent calls, where the worker remembers them
    /// ([`RepeatLookup::Remember`]): beyond it the oldest leave before their window ends.
    pub repeat_memory_bytes: usize,
    /// A pause after each stored batch: zero, except in tests that need a detector slower than its input.
    pub throttle: Duration,
    /// Tests of supervision only: the worker stops after this many stored batches, as a crashed one would.
    pub stop_after_batches: Option<u64>,
    /// Tool lists beyond these become dead letters: no record may hold the detector for long.
    pub tool_lists: driftline_schemas::ToolListLimits,
    /// Records read into one batch at most (a batch takes what the bus has ready, up to this); at most
    /// [`MAX_BATCH_RECORDS_BOUND`].
    pub max_batch_records: usize,
    /// Servers and tools one project may hold state for: a record that would add one more is a dead letter.
    pub keys: KeyLimits,
    /// A tool without a call (or a declaration) for this long, in bus time, releases its state and its
    /// place in its project's limits.
    pub forget_unseen_tools_after: Duration,
    /// Once a batch has processed for this long, the rest of its streams that carry tool lists waits for
    /// the next batch (`fair.rs`).
    pub max_batch_time: Duration,
}

/// The largest `max_batch_records` a configuration may set (the batch-size histogram's buckets reach it;
/// `src/config.rs` checks the same figure, written out there because the fuzz crate compiles it alone).
pub const MAX_BATCH_RECORDS_BOUND: usize = 100_000;

impl Default for WorkerSettings {
    fn default() -> Self {
        WorkerSettings {
            thresholds: DetectorThresholds::default(),
            repeat_window_hours: 24,
            repeat_memory_bytes: 256 << 20,
            throttle: Duration::ZERO,
            stop_after_batches: None,
            tool_lists: driftline_schemas::ToolListLimits::default(),
            max_batch_records: 20_000,
            keys: KeyLimits::default(),
            forget_unseen_tools_after: Duration::from_secs(30 * 24 * 3600),
            max_batch_time: Duration::from_secs(1),
        }
    }
}

/// One tool's detector state: its return-shape window and how its returns meet its declared output.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolState {
    /// Flattened: state stored before declared outputs were checked reads back as is.
    #[serde(flatten)]
    pub shape: ToolShapeState,
    #[serde(default, skip_serializing_if = "no_contract")]
    pub contract: ToolContractState,
    /// When the bus took the tool's last call or declaration: a tool unseen for
    /// [`WorkerSettings::forget_unseen_tools_after`] is forgotten. State stored before it had none: such a
    /// tool counts from the first sweep that sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<Timestamp>,
}

fn no_contract(contract: &ToolContractState) -> bool {
    *contract == ToolContractState::default()
}

/// How often the lag gauge is refreshed while the worker waits (on the store, or paused).
const LAG_REFRESH: Duration = Duration::from_millis(200);

/// Seconds since `at` by the wall clock (never negative: clocks of producers differ a little).
fn age_seconds(at: Timestamp) -> f64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    (now - at.as_millis()).max(0) as f64 / 1e3
}

/// `key`'s state, made when it is new (`added` then counts it against its project's limit).
fn state_of<'s, K: std::hash::Hash + Eq + Clone, S: Default>(
    states: &'s mut HashMap<K, S>,
    key: &K,
    added: impl FnOnce(),
) -> &'s mut S {
    match states.entry(key.clone()) {
        std::collections::hash_map::Entry::Occupied(held) => held.into_mut(),
        std::collections::hash_map::Entry::Vacant(new) => {
            added();
            new.insert(S::default())
        }
    }
}

pub struct Worker<C> {
    consumer: C,
    store: Arc<dyn DetectorStore>,
    settings: WorkerSettings,
    positions: Positions,
    servers: HashMap<ServerKey, ServerState>,
    tools: HashMap<ToolKey, ToolState>,
    /// How many of `servers` and `tools` each project holds, against `settings.keys`.
    keys_held: KeysHeld,
    thresholds: HashMap<ProjectName, DetectorThresholds>,
    /// Records that could not be used, counted (and logged) and skipped so the log keeps flowing.
    pub dead_letters: u64,
    /// Dead letters get at most a few log lines per second (each is counted, and published with its reason).
    dead_letter_lines: driftline_schemas::LogBudget,
    /// Where unusable records go, with the reason (the `dead-letters` topic); without it they are only
    /// logged and counted (the embedded bus, whose only producer is ingest, which validated them).
    dead_letter_sink: Option<Arc<dyn Producer>>,
    /// Where declared output schemas go (the spans topic, keyed by tool), so each reaches the tool's state
    /// in order with its calls; without it declarations are not published (tests of the worker alone).
    declaration_sink: Option<Arc<dyn Producer>>,
    /// Memory holds a batch the store did not take: reload from the store before reading on.
    stale: bool,
    /// The batch being written while the next one is read and processed (at most one).
    in_flight: Option<InFlight>,
    /// The input stream (partition) each key's state belongs to: it moves with it in a consumer group.
    server_streams: HashMap<ServerKey, u32>,
    tool_streams: HashMap<ToolKey, u32>,
    /// In a consumer group other members apply threshold changes: re-read them now and then.
    settings_read_at: std::time::Instant,
    /// Drops what this worker alone reads from the bus once stored ([`Consumer::releaser`]), the positions
    /// last released, when, and the release under way.
    releaser: Option<Arc<dyn Release>>,
    released: Positions,
    released_at: std::time::Instant,
    releasing: Option<tokio::task::JoinHandle<bool>>,
    /// Partitions the lag gauge has a series for.
    lag_labels: Vec<String>,
    /// Keys (as on the bus) whose stored state cannot be read, with the reason: their records become dead
    /// letters (the state stays in the store for repair) while every other key keeps flowing.
    quarantined: BTreeMap<String, String>,
    /// The last tool list read per server, to take a list sent again without parsing it.
    list_texts: ListTexts,
    /// Rollup rows as stored (those written since the last reload, and those read before folding).
    rollups: RollupCache,
    /// The bus time of the last sweep for tools unseen too long.
    swept_at: Option<Timestamp>,
    /// Records a batch left for the next at its time budget (`fair.rs`), in order per stream.
    carried: Vec<Delivered>,
    /// The identities of recent calls per stream, where the store is not asked per batch.
    recent: repeats::RecentCalls,
    /// Dead letters per project and kind, stored with the batches that refused them.
    dead_letter_counts: dead_letters::DeadLetterCounts,
    /// Per stream, the input position up to which its calls are in rollups (a `rollups` state row each,
    /// written with every batch). A stream whose stored position is past it was read by a driftline without
    /// rollups (before an upgrade, or beside it during a rolling one): its rollups are rebuilt from the
    /// stored calls before the worker reads on.
    rollup_marks: BTreeMap<u32, u64>,
}

/// A batch handed to the store whose write has not been seen to finish.
struct InFlight {
    /// The store's write, and how long it took.
    write: tokio::task::JoinHandle<(Result<(), StoreError>, Duration)>,
    positions: Positions,
    /// Its calls' identities: a retry of one of them in the next batch is a repeat before the store can
    /// tell.
    identities: HashMap<String, driftline_schemas::InputPosition>,
    records: usize,
    rollup_rows: usize,
    /// Bytes of tool-list text the batch parsed.
    list_bytes: usize,
}

/// After a batch that parsed this much tool-list text, the heap's free memory goes back to the system.
const RELEASE_AFTER_LIST_BYTES: usize = 1 << 20;

/// The state row that says up to where a stream's calls are in rollups.
const ROLLUP_MARK: &str = "rollups";

fn rollup_mark(stream: u32, offset: u64) -> DetectorState {
    DetectorState { kind: ROLLUP_MARK.to_owned(), key: stream.to_string(), stream, state: offset.to_string() }
}

/// How often a member of a consumer group re-reads every project's thresholds from the store.
const SETTINGS_REFRESH: Duration = Duration::from_secs(10);

/// How often stored batches are made durable and their records released to the bus (the embedded log
/// holds about this much more than its backlog).
const RELEASE_EVERY: Duration = Duration::from_secs(2);

/// What one poll did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    pub records: usize,
}

impl<C: Consumer> Worker<C> {
    /// Restores every detector state and the input positions from the store.
    pub async fn resume(
        consumer: C,
        store: Arc<dyn DetectorStore>,
        settings: WorkerSettings,
    ) -> Result<Self, WorkerError> {
        let mut worker = Worker {
            releaser: consumer.releaser(),
            releasing: None,
            consumer,
            store,
            settings,
            positions: Positions::new(),
            servers: HashMap::new(),
            tools: HashMap::new(),
            keys_held: KeysHeld::default(),
            thresholds: HashMap::new(),
            dead_letters: 0,
            dead_letter_lines: driftline_schemas::LogBudget::default(),
            dead_letter_sink: None,
            declaration_sink: None,
            stale: false,
            in_flight: None,
            server_streams: HashMap::new(),
            tool_streams: HashMap::new(),
            settings_read_at: std::time::Instant::now(),
            released: Positions::new(),
            released_at: std::time::Instant::now(),
            lag_labels: Vec::new(),
            quarantined: BTreeMap::new(),
            list_texts: ListTexts::default(),
            rollups: RollupCache::default(),
            rollup_marks: BTreeMap::new(),
            swept_at: None,
            carried: Vec::new(),
            recent: repeats::RecentCalls::new(
                i64::from(settings.repeat_window_hours) * 3_600_000,
                settings.repeat_memory_bytes,
            ),
            dead_letter_counts: Default::default(),
        };
        worker.reload().await?;
        Ok(worker)
    }

    /// Publishes unusable records to `sink` (before the batch that skips them is stored).
    pub fn with_dead_letters(mut self, sink: Arc<dyn Producer>) -> Self {
        self.dead_letter_sink = Some(sink);
        self
    }

    /// Publishes each baseline's declared output schemas to `sink` (before the batch that changed the
    /// baseline is stored: a replay publishes them again, and the tools' state ignores what it holds).
    pub fn with_declarations(mut self, sink: Arc<dyn Producer>) -> Self {
        self.declaration_sink = Some(sink);
        self
    }

    /// Replaces everything held in memory with what the store holds for the streams this worker reads, and
    /// reads the bus from there again. After a failed batch this undoes what processing it did, so no
    /// record counts twice.
    async fn reload(&mut self) -> Result<(), WorkerError> {
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
        self.server_streams.clear();
        self.tool_streams.clear();
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
    async fn load_recent(&mut self, streams: Streams<'_>) -> Result<(), WorkerError> {
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
    fn report_recent(&mut self) {
        let evicted = self.recent.take_evicted();
        if evicted > 0 {
            metrics::REPEAT_EVICTED.inc_by(evicted);
            if let Some(suppressed) = self.dead_letter_lines.take(std::time::Instant::now()) {
                tracing::warn!(evicted, capacity = self.recent.capacity(), suppressed, "call identities left memory before their repeat window ended (detector.repeat_memory_bytes): a retry of one is counted again");
            }
        }
        metrics::REPEAT_IDENTITIES.set(self.recent.len() as i64);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let horizon = self.recent.oldest().map_or(0, |oldest| (now - oldest).max(0)) as f64 / 1e3;
        metrics::REPEAT_HORIZON.set(horizon.min(f64::from(self.settings.repeat_window_hours) * 3600.0));
    }

    /// Adds stored state, positions and settings to what memory holds.
    fn restore(&mut self, resume: Resume) -> Result<(), WorkerError> {
        for DetectorState { kind, key, stream, state } in resume.states {
            let read = match kind.as_str() {
                "server" => ServerKey::parse(&key).map_err(|err| err.to_string()).and_then(|parsed| {
                    let state = serde_json::from_str(&state).map_err(|err| err.to_string())?;
                    self.servers.insert(parsed.clone(), state);
                    self.server_streams.insert(parsed, stream);
                    Ok(())
                }),
                "tool" => ToolKey::parse(&key).map_err(|err| err.to_string()).and_then(|parsed| {
                    let state: ToolState = serde_json::from_str(&state).map_err(|err| err.to_string())?;
                    self.tools.insert(parsed.clone(), state);
                    self.tool_streams.insert(parsed, stream);
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
        metrics::QUARANTINED_KEYS.set(self.quarantined.len() as i64);
        self.keys_held.recount(self.servers.keys(), self.tools.keys());
        self.thresholds = project_settings(resume.settings);
        self.settings_read_at = std::time::Instant::now();
        self.positions.extend(resume.positions);
        Ok(())
    }

    /// Follows the consumer group: forgets the state of streams moved away, loads that of streams moved here.
    async fn rebalance(&mut self) -> Result<(), WorkerError> {
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
        metrics::REBALANCES.inc();
        // The batch in flight holds records of the partitions moved away: it is stored before they go.
        // (Should it fail, the change is not lost: the reload that follows reads what is owned now.)
        self.finish_in_flight().await?;
        // Rows of partitions moved away may be written by their new owner from now on.
        self.rollups.clear();
        metrics::OWNED_PARTITIONS.set(self.consumer.owned().map_or(0, |owned| owned.len()) as i64);
        let revoked: BTreeSet<u32> = change.revoked.iter().copied().collect();
        let (server_streams, tool_streams) = (&self.server_streams, &self.tool_streams);
        self.servers.retain(|key, _| server_streams.get(key).is_none_or(|s| !revoked.contains(s)));
        self.list_texts.retain(|key| server_streams.get(key).is_none_or(|s| !revoked.contains(s)));
        self.tools.retain(|key, _| tool_streams.get(key).is_none_or(|s| !revoked.contains(s)));
        self.server_streams.retain(|_, s| !revoked.contains(s));
        self.tool_streams.retain(|_, s| !revoked.contains(s));
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

    /// Reads up to `max` records (waiting up to `wait` for the first), processes them, stores the batch:
    /// when this returns, everything read is stored.
    pub async fn poll_once(&mut self, max: usize, wait: Duration) -> Result<Progress, WorkerError> {
        let progress = self.step(max, wait).await?;
        self.finish_in_flight().await?;
        Ok(progress)
    }

    /// Reads up to `max` records (waiting up to `wait` for the first) and processes them while the batch
    /// before is still being written; once that write is stored, this batch's write starts and the step
    /// returns. Outputs, state and positions of each batch stay one write, stored in input order.
    pub async fn step(&mut self, max: usize, wait: Duration) -> Result<Progress, WorkerError> {
        if self.stale {
            self.reload().await?;
        }
        if let Err(err) = self.rebalance().await {
            // Some of the new streams' state may be loaded: start over from the store.
            self.stale = true;
            return Err(err);
        }
        // Read on after the batch in flight, whose records memory already includes.
        let mut read = self.positions.clone();
        if let Some(in_flight) = &self.in_flight {
            read.extend(in_flight.positions.iter().map(|(s, o)| (*s, *o)));
        }
        // Records a batch before left for later come first; the bus is read after them. (They stay held
        // until the poll succeeds: a Kafka consumer does not give them again.)
        let mut after_carried = read.clone();
        after_carried.extend(self.carried.iter().map(|r| (r.position.partition, r.position.offset)));
        let room = max.saturating_sub(self.carried.len());
        let mut polled = match (room, self.carried.is_empty(), self.in_flight.is_some()) {
            (0, _, _) => Vec::new(),
            (_, false, _) => self.consumer.poll(&after_carried, room, Duration::ZERO).await?,
            // Only what is ready: with nothing, the batch in flight is stored now rather than after the
            // wait (so positions, offsets and lag move as soon as its write lands), and the wait follows.
            (_, true, true) => match self.consumer.poll(&read, room, Duration::ZERO).await? {
                ready if ready.is_empty() => {
                    self.finish_in_flight().await?;
                    self.consumer.poll(&read, room, wait).await?
                }
                ready => ready,
            },
            (_, true, false) => self.consumer.poll(&read, room, wait).await?,
        };
        // A new owner of a partition starts at the group's committed offset, which may be behind the
        // stored position: records the stored state already includes are skipped.
        polled.retain(|r| {
            after_carried.get(&r.position.partition).is_none_or(|&last| r.position.offset > last)
        });
        let mut records = std::mem::take(&mut self.carried);
        records.extend(polled);
        if records.is_empty() {
            // Idle: nothing waits behind the batch in flight.
            self.finish_in_flight().await?;
            // The lag gauges still follow the partitions (watermarks refresh in the background).
            if self.report_lag().await? == 0 {
                metrics::OLDEST_UNPROCESSED.set(0.0);
            }
            return Ok(Progress { records: 0 });
        }
        // The oldest record not processed yet is among those just read (each partition's next one).
        if let Some(oldest) = records.iter().map(|r| r.appended_at).min() {
            metrics::OLDEST_UNPROCESSED.set(age_seconds(oldest));
        }
        // The gauge last read the bus while idle: a long first batch would leave it at 0 with these records
        // waiting. Only a gauge: a bus that cannot answer now does not fail the batch.
        let _ = self.report_lag().await;
        let mut batch = Batch::default();
        let mut dirty = Dirty::default();
        let mut dead = Vec::new();
        let mut declarations = Vec::new();
        // Memory runs ahead of the store until this batch is stored.
        self.stale = true;
        if let Some(now) = records.iter().map(|r| r.appended_at).max() {
            self.forget_unseen_tools(now, &mut batch, &mut dirty);
        }
        let mut calls = self.read_calls(&records).await?;
        let started = std::time::Instant::now();
        let (mut left, order) = fair::Schedule::new(&records);
        for index in order {
            let record = &records[index];
            if left.leaves(index, record, started.elapsed() >= self.settings.max_batch_time) {
                continue;
            }
            metrics::RECORDS.with_label_values(&[record.topic.as_str()]).inc();
            if let Err(refusal) =
                self.process(record, calls[index].take(), &mut batch, &mut dirty, &mut declarations)
            {
                dead.push(dead_letter(record, refusal.reason));
            }
            batch.positions.insert(record.position.partition, record.position.offset);
        }
        let processed = records.len() - left.count();
        if left.count() > 0 {
            metrics::CARRIED_RECORDS.inc_by(left.count() as u64);
            tracing::debug!(processed, carried = left.count(), streams = ?left.streams(), "batch closed at its time budget: tool-list streams carried over");
        }
        self.carried = left.take(records);
        let positions = batch.positions.clone();
        self.fold_rollups(&mut batch).await?;
        // Every batch says up to where its streams' calls are in rollups, in the write of its positions.
        batch.states.extend(positions.iter().map(|(stream, offset)| rollup_mark(*stream, *offset)));
        self.flush_state(&mut batch, &dirty)?;
        batch.states.extend(self.dead_letter_counts.take_changed());
        // Dead letters are durable before the position that skips them (a replay may publish one twice;
        // each names its source topic, partition and offset).
        let mut published = match (&self.dead_letter_sink, dead.is_empty()) {
            (Some(sink), false) => sink.publish(dead).await,
            _ => Ok(()),
        };
        if let (Ok(()), Some(sink), false) = (&published, &self.declaration_sink, declarations.is_empty()) {
            let count = declarations.len();
            published = sink.publish(declarations).await;
            if published.is_ok() {
                metrics::DECLARATIONS.inc_by(count as u64);
                tracing::debug!(count, "output declarations published");
            }
        }
        // When the batch is not stored, memory holds state it changed: go back to what the store holds
        // (now, or before the next poll if the store cannot answer now either).
        if let Err(err) = published {
            let _ = self.reload().await;
            return Err(err.into());
        }
        // Batches are stored in input order: this one's write starts once the one before is stored.
        self.finish_in_flight().await?;
        // Only a cache: if the batch is not stored, the reload that follows forgets every row.
        self.rollups.trim(&batch.rollups);
        let identities =
            batch.call_identities.iter().map(|(identity, at, _)| (identity.clone(), *at)).collect();
        let rollup_rows = batch.rollups.len();
        let store = self.store.clone();
        self.in_flight = Some(InFlight {
            write: tokio::spawn(async move {
                let started = std::time::Instant::now();
                let stored = store.apply(batch).await;
                (stored, started.elapsed())
            }),
            positions,
            identities,
            records: processed,
            rollup_rows,
            list_bytes: self.list_texts.take_parsed_bytes(),
        });
        // Memory is ahead of the store only by the batch in flight, which `finish_in_flight` settles.
        self.stale = false;
        Ok(Progress { records: processed })
    }

    /// Now and then, where the bus can drop what this worker alone reads (the embedded log), makes the
    /// stored batches durable and releases their records, in a task beside the polls, one at a time (the
    /// detector waiting for them stored ≈ 25 % fewer spans/s on a backlog, beside them ≈ 19 % fewer).
    /// Releasing only once caught up saved some of that but dropped a whole backlog at once, which held
    /// appends up: span → queryable p99 1 s instead of 30 ms. A failure only postpones a release: the
    /// batches are stored.
    async fn release_stored(&mut self) {
        let Some(releaser) = &self.releaser else { return };
        if let Some(releasing) = self.releasing.take_if(|task| task.is_finished()) {
            if !releasing.await.unwrap_or(false) {
                self.released = Positions::new();
            }
        }
        if self.releasing.is_some()
            || self.released_at.elapsed() < RELEASE_EVERY
            || self.released == self.positions
        {
            return;
        }
        self.released_at = std::time::Instant::now();
        self.released = self.positions.clone();
        let (store, releaser, positions) = (self.store.clone(), releaser.clone(), self.positions.clone());
        self.releasing = Some(tokio::spawn(async move {
            let released = async {
                store.sync().await?;
                Ok::<_, WorkerError>(releaser.release(&positions).await?)
            };
            match released.await {
                Ok(records) => {
                    metrics::RELEASED_RECORDS.inc_by(records);
                    tracing::debug!(records, ?positions, "bus records released");
                    true
                }
                Err(err) => {
                    metrics::RELEASE_FAILURES.inc();
                    tracing::warn!(error = %err, "bus records not released; trying again later");
                    false
                }
            }
        }));
    }

    /// Waits until the batch [`Worker::step`] left in flight is stored.
    pub async fn flush(&mut self) -> Result<(), WorkerError> {
        self.finish_in_flight().await
    }

    /// Waits until the batch in flight is stored, then moves the positions on and commits them to the
    /// group. A batch the store refused leaves memory ahead of the store: everything is read again from
    /// what the store holds.
    async fn finish_in_flight(&mut self) -> Result<(), WorkerError> {
        let Some(in_flight) = self.in_flight.take() else { return Ok(()) };
        let InFlight { write, positions, records, rollup_rows, list_bytes, .. } = in_flight;
        // A slow store must not freeze the lag gauge: it keeps following the bus while the batch is written.
        tokio::pin!(write);
        let mut refresh = tokio::time::interval(LAG_REFRESH);
        refresh.tick().await;
        let applied = loop {
            tokio::select! {
                applied = &mut write => break applied,
                _ = refresh.tick() => {
                    let _ = self.report_lag().await;
                }
            }
        };
        let applied = applied
            .map_err(|err| WorkerError::Store(StoreError::Unavailable(format!("store write failed: {err}"))))
            .and_then(|(stored, took)| stored.map(|()| took).map_err(WorkerError::from));
        let took = match applied {
            Ok(took) => took,
            Err(err) => {
                self.stale = true;
                let _ = self.reload().await;
                return Err(err);
            }
        };
        if list_bytes >= RELEASE_AFTER_LIST_BYTES {
            release_freed_memory(list_bytes);
        }
        self.rollup_marks.extend(positions.iter().map(|(s, o)| (*s, *o)));
        metrics::ROLLUP_ROWS.with_label_values(&["written"]).inc_by(rollup_rows as u64);
        let seconds = took.as_secs_f64();
        metrics::FLUSH_SECONDS.observe(seconds);
        metrics::BATCH_SIZE.observe(records as f64);
        self.positions.extend(positions);
        self.consumer.commit(&self.positions).await?;
        self.release_stored().await;
        let lag = self.report_lag().await?;
        if lag == 0 {
            metrics::OLDEST_UNPROCESSED.set(0.0);
        }
        self.report_recent();
        metrics::STATE_KEYS.with_label_values(&["server"]).set(self.servers.len() as i64);
        metrics::STATE_KEYS.with_label_values(&["tool"]).set(self.tools.len() as i64);
        tracing::debug!(records, rollup_rows, seconds, lag, "batch stored");
        Ok(())
    }

    /// Streams this detector resumed whose stored position is past the calls in rollups (an older version,
    /// or one beside this during a rolling upgrade, read them): rebuilds their rollup rows from the stored
    /// calls, each included up to the stream's stored position, and marks the streams, in one batch, before
    /// reading on. A rebuilt row holds every stored call, so it never has fewer than the row it replaces.
    async fn backfill_rollups(&mut self) -> Result<(), WorkerError> {
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
            .tool_streams
            .iter()
            .filter_map(|(key, stream)| {
                let offset = *pending.get(stream)?;
                Some((key.clone(), driftline_schemas::InputPosition { partition: *stream, offset }))
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
        metrics::ROLLUP_ROWS.with_label_values(&["backfilled"]).inc_by(count as u64);
        tracing::info!(streams = ?pending.keys().collect::<Vec<_>>(), tools = tools.len(), rows = count, seconds = started.elapsed().as_secs_f64(), "rollups rebuilt from stored calls");
        self.rollup_marks.extend(pending);
        Ok(())
    }

    /// Folds the batch's calls into their rollup rows (read from the store first where memory has none),
    /// adding the changed rows, whole, to the batch.
    async fn fold_rollups(&mut self, batch: &mut Batch) -> Result<(), WorkerError> {
        let missing = self.rollups.missing(batch.calls.iter().map(|(_, _, call)| call));
        if !missing.is_empty() {
            let found = self.store.rollups(&missing).await?;
            metrics::ROLLUP_ROWS.with_label_values(&["loaded"]).inc_by(found.len() as u64);
            tracing::debug!(asked = missing.len(), found = found.len(), "rollup rows loaded");
            self.rollups.hold(missing, found);
        }
        let changed = self
            .rollups
            .fold(batch.calls.iter().map(|(_, position, call)| (call, *position)))
            .map_err(|err| WorkerError::Store(StoreError::Corrupt(err.to_string())))?;
        tracing::debug!(rows = changed.len(), calls = batch.calls.len(), "rollup rows folded");
        batch.rollups = changed;
        Ok(())
    }

    /// Sets the lag gauges (total and per owned partition; partitions moved away lose their series).
    async fn report_lag(&mut self) -> Result<u64, WorkerError> {
        let lags = self.consumer.lag(&self.positions).await?;
        for gone in self.lag_labels.iter().filter(|label| !lags.contains_key(*label)) {
            let _ = metrics::PARTITION_LAG.remove_label_values(&[gone.as_str()]);
        }
        for (partition, lag) in &lags {
            metrics::PARTITION_LAG.with_label_values(&[partition.as_str()]).set(*lag as i64);
        }
        let total: u64 = lags.values().sum();
        metrics::LAG.set(total as i64);
        self.lag_labels = lags.into_keys().collect();
        Ok(total)
    }

    /// Polls until `shutdown` turns true; store or bus failures are retried with capped backoff. A batch in
    /// progress is finished (stored) before it stops, so a stop loses no work and leaves the group clean.
    pub async fn run(mut self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut backoff = Duration::from_millis(100);
        let mut batches = 0u64;
        // Tests that pause or stop the worker count stored batches: there each batch is stored before the
        // next is read.
        let pipelined = self.settings.throttle.is_zero() && self.settings.stop_after_batches.is_none();
        let max = self.settings.max_batch_records;
        while !*shutdown.borrow() {
            let polled = if pipelined {
                self.step(max, Duration::from_millis(500)).await
            } else {
                self.poll_once(max, Duration::from_millis(500)).await
            };
            match polled {
                Ok(progress) => {
                    backoff = Duration::from_millis(100);
                    batches += u64::from(progress.records > 0);
                    if progress.records == 0 {
                        // Idle: what the last batches stored need not wait for another batch to be released.
                        self.release_stored().await;
                    }
                    if self.settings.stop_after_batches.is_some_and(|limit| batches >= limit) {
                        tracing::warn!(batches, "detector worker stops (detector.test_stop_after_batches)");
                        return;
                    }
                    if progress.records > 0 && !self.settings.throttle.is_zero() {
                        // The lag gauge keeps following the bus through the pause, as through a slow store.
                        let until = tokio::time::Instant::now() + self.settings.throttle;
                        while tokio::time::Instant::now() < until {
                            tokio::time::sleep_until(until.min(tokio::time::Instant::now() + LAG_REFRESH))
                                .await;
                            let _ = self.report_lag().await;
                        }
                    }
                }
                Err(err) => {
                    metrics::RETRIES.inc();
                    tracing::warn!(error = %err, retry_in_ms = backoff.as_millis() as u64, "detector batch failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = shutdown.changed() => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        }
        if let Err(err) = self.finish_in_flight().await {
            tracing::warn!(error = %err, "detector batch in flight at shutdown not stored; it is read again at the next start");
        }
        tracing::info!(positions = ?self.positions, "detector worker stopped");
    }

    /// Bytes the tools of `project` hold in this worker (shape windows and contract checks, declarations
    /// aside), and how many tools: what `limits.max_state_bytes_per_project` bounds at its worst case.
    pub fn state_bytes(&self, project: &str) -> (u64, usize) {
        let tools = self.tools.iter().filter(|(key, _)| key.project.as_str() == project);
        tools.fold((0, 0), |(bytes, count), (_, state)| {
            (bytes + (state.shape.size_bytes() + state.contract.size_bytes()) as u64, count + 1)
        })
    }

    fn thresholds_of(&self, project: &str) -> DetectorThresholds {
        self.thresholds.get(project).copied().unwrap_or(self.settings.thresholds)
    }

    /// The calls of a batch's span records, read once (`None` for other topics), with the calls that
    /// repeat one already stored from another record (a client's retry), or one earlier in the batch,
    /// marked as repeats. A replayed record finds its own position stored: it is no repeat.
    async fn read_calls(&self, records: &[Delivered]) -> Result<Vec<Option<SpanRecord>>, WorkerError> {
        let mut calls: Vec<Option<SpanRecord>> = records
            .iter()
            .map(|record| {
                (record.topic == Topic::Spans).then(|| {
                    if OutputDeclaration::looks_like(&record.payload) {
                        return read_declaration(record);
                    }
                    if OperatorCommand::may_be_tool_command(&record.payload) {
                        if let Ok(command) = serde_json::from_slice::<OperatorCommand>(&record.payload) {
                            return SpanRecord::Command(Box::new(command));
                        }
                    }
                    self.read_call(record)
                        .and_then(|call| check_key(record, &call.key().to_string()).map(|()| call))
                        .map(|call| (call.identity(), call))
                        .map(|(identity, call)| SpanRecord::Call {
                            identity,
                            call: Box::new(call),
                            repeat: false,
                        })
                        .unwrap_or_else(SpanRecord::Unusable)
                })
            })
            .collect();
        let identities: Vec<String> = calls
            .iter()
            .filter_map(|c| match c {
                Some(SpanRecord::Call { identity, .. }) => Some(identity.clone()),
                _ => None,
            })
            .collect();
        if identities.is_empty() {
            return Ok(calls);
        }
        let earliest = records.iter().map(|r| r.appended_at.as_millis()).min().unwrap_or_default();
        let window = i64::from(self.settings.repeat_window_hours) * 3_600_000;
        let since =
            Timestamp::from_millis(earliest.saturating_sub(window)).unwrap_or_else(|| records[0].appended_at);
        let stored = match self.store.repeat_lookup() {
            RepeatLookup::Store => self.store.stored_calls(&identities, since).await?,
            // Every call this worker's streams carried in the window is in `recent`.
            RepeatLookup::Remember => HashMap::new(),
        };
        let mut seen = std::collections::HashSet::new();
        for (record, call) in records.iter().zip(calls.iter_mut()) {
            if let Some(SpanRecord::Call { identity, repeat, .. }) = call {
                let in_flight = self.in_flight.as_ref().and_then(|batch| batch.identities.get(identity));
                let remembered = self.recent.find(repeats::identity_key(identity));
                let first = stored.get(identity).or(in_flight).copied().or(remembered);
                let elsewhere = first.is_some_and(|at| at != record.position);
                *repeat = elsewhere || !seen.insert(identity.clone());
            }
        }
        Ok(calls)
    }

    /// Runs the detectors over one record; Err(refusal) when the record cannot be used (a dead letter).
    fn process(
        &mut self,
        record: &Delivered,
        call: Option<SpanRecord>,
        batch: &mut Batch,
        dirty: &mut Dirty,
        declarations: &mut Vec<Message>,
    ) -> Result<(), Refusal> {
        let quarantined = self.quarantined.get(&record.key);
        let outcome = if let Some(reason) = quarantined {
            Err(Refusal::new(
                RefusalKind::Quarantined,
                format!(
                    "key {} is quarantined: {reason}; repair or delete that row, or forget the key",
                    record.key
                ),
            ))
        } else {
            match record.topic {
                // Tool lists, probe failures and baseline acceptances share the server's partition, so an
                // acceptance applies in order with the lists, on the instance that owns the server.
                Topic::ToolLists => match serde_json::from_slice::<ToolListRecord>(&record.payload) {
                    Ok(list) => check_key(record, &list.key().to_string())
                        .map_err(Refusal::from)
                        .and_then(|()| self.room_for_server(&list.key()))
                        .and_then(|()| {
                            let surfaces = list.surfaces.as_ref();
                            let limits = self.settings.tool_lists;
                            surfaces.map_or(Ok(()), |s| {
                                limits
                                    .check_surfaces(s)
                                    .map_err(|err| Refusal::new(RefusalKind::ListLimit, err.to_string()))
                            })
                        })
                        .and_then(|()| {
                            let (servers, key) = (&self.servers, list.key());
                            self.list_texts.read(&list, self.settings.tool_lists, || {
                                tool_lists::held_beside(servers, &key)
                            })
                        })
                        .map(|tools| self.tool_list(&list, tools, record, batch, dirty, declarations)),
                    Err(err) => {
                        if let Ok(failure) = serde_json::from_slice::<ProbeFailure>(&record.payload) {
                            check_key(record, &failure.key().to_string())
                                .map_err(Refusal::from)
                                .and_then(|()| self.room_for_server(&failure.key()))
                                .map(|()| self.probe_failure(&failure, record, batch, dirty))
                        } else if let Ok(command) = serde_json::from_slice::<OperatorCommand>(&record.payload)
                        {
                            check_key(record, &command.key())
                                .map_err(Refusal::from)
                                .map(|()| self.command(command, record, batch, dirty, declarations))
                        } else {
                            Err(Refusal::from(format!("not a tool-list snapshot: {err}")))
                        }
                    }
                },
                Topic::Spans => match call {
                    Some(SpanRecord::Call { identity, call, repeat: false }) => {
                        let key = call.key();
                        // Checked before the call's identity is kept: a refused call is no call stored.
                        self.room_for_tool(&key).map(|()| {
                            if self.store.repeat_lookup() == RepeatLookup::Remember {
                                let at = record.appended_at.as_millis();
                                self.recent.remember(repeats::identity_key(&identity), record.position, at);
                            }
                            batch.call_identities.push((identity, record.position, record.appended_at));
                            self.call(*call, key, record, batch, dirty);
                        })
                    }
                    Some(SpanRecord::Call { repeat: true, .. }) => {
                        metrics::REPEATED_CALLS.inc();
                        tracing::debug!(key = %record.key, offset = record.position.offset, "call sent again: counted once");
                        Ok(())
                    }
                    Some(SpanRecord::Declaration(declaration)) => self
                        .room_for_tool(&declaration.key())
                        .map(|()| self.declaration(&declaration, record, dirty)),
                    Some(SpanRecord::Command(command)) => check_key(record, &command.key())
                        .map_err(Refusal::from)
                        .map(|()| self.command(*command, record, batch, dirty, declarations)),
                    Some(SpanRecord::Unusable(reason)) => Err(Refusal::from(reason)),
                    None => Err(Refusal::from("span record not read".to_owned())),
                },
                Topic::Commands => serde_json::from_slice::<OperatorCommand>(&record.payload)
                    .map_err(|err| format!("not an operator command: {err}"))
                    .and_then(|command| {
                        check_key(record, &command.key())
                            .map(|()| self.command(command, record, batch, dirty, declarations))
                    })
                    .map_err(Refusal::from),
                Topic::DeadLetters => Err(Refusal::from("dead letters are not detector input".to_owned())),
            }
        };
        if let Err(refusal) = &outcome {
            self.dead_letters += 1;
            metrics::DEAD_LETTERS.with_label_values(&[refusal.kind.as_str()]).inc();
            self.dead_letter_counts.add(record, refusal);
            // `suppressed`: dead letters since the last line that got none (the metric counts them all).
            if let Some(suppressed) = self.dead_letter_lines.take(std::time::Instant::now()) {
                tracing::warn!(topic = record.topic.as_str(), key = %record.key, offset = record.position.offset, kind = refusal.kind.as_str(), reason = %refusal.reason, suppressed, "unusable record skipped");
            }
        }
        outcome
    }

    /// Whether a record of `key` may be used: a server held already, or one its project has room for.
    fn room_for_server(&self, key: &ServerKey) -> Result<(), Refusal> {
        match self.servers.contains_key(key) {
            true => Ok(()),
            false => self
                .keys_held
                .room_for_server(key, self.settings.keys)
                .map_err(|reason| Refusal::new(RefusalKind::ServerLimit, reason)),
        }
    }

    /// Whether a record of `key` may be used: a tool held already, or one its project has room for.
    fn room_for_tool(&self, key: &ToolKey) -> Result<(), Refusal> {
        match self.tools.contains_key(key) {
            true => Ok(()),
            false => {
                let per_tool =
                    driftline_detectors::tool_state_worst_case_bytes(&self.thresholds_of(&key.project));
                self.keys_held
                    .room_for_tool(key, self.settings.keys, per_tool)
                    .map_err(|reason| Refusal::new(RefusalKind::ToolLimit, reason))
            }
        }
    }

    /// A record from ingest, or a raw span from another producer: checked and fingerprinted here exactly as
    /// ingest would.
    fn read_call(&self, record: &Delivered) -> Result<ToolCallRecord, String> {
        if let Ok(call) = serde_json::from_slice::<ToolCallRecord>(&record.payload) {
            return Ok(call);
        }
        let span: ToolCallSpan =
            serde_json::from_slice(&record.payload).map_err(|err| format!("not a tool-call span: {err}"))?;
        span.check()?;
        // The published schema requires `project` of other producers (ingest sets it from the API key).
        let project =
            span.project.clone().ok_or("project is required (schemas/json/tool-call-span.v1.json)")?;
        Ok(record_from_span(&span, &project, record.appended_at))
    }

    /// A snapshot, its tools read (shared by the state, an event and the stored snapshot).
    fn tool_list(
        &mut self,
        snapshot: &ToolListRecord<'_>,
        tools: Arc<ToolsText>,
        record: &Delivered,
        batch: &mut Batch,
        dirty: &mut Dirty,
        declarations: &mut Vec<Message>,
    ) {
        let key = snapshot.key();
        let policy = Acceptance::from(&self.thresholds_of(&snapshot.project));
        let state = state_of(&mut self.servers, &key, || self.keys_held.server_added(&key));
        let was_down = state.down.is_some();
        let context = RecordContext {
            project: &snapshot.project,
            server: &snapshot.server,
            position: record.position,
            at: record.appended_at,
        };
        let before = DeclaredBefore::of(state);
        let observed = state.observe_server(Arc::clone(&tools), snapshot.surfaces.as_ref(), context, policy);
        let changed = before.changes(state);
        declarations.extend(declaration_messages(&snapshot.project, &snapshot.server, changed, record));
        apply_outputs(observed.outputs, batch);
        let hash = observed.hash;
        batch.tool_lists.push(StoredToolList {
            project: snapshot.project.to_string(),
            server: snapshot.server.to_string(),
            captured_at: snapshot.captured_at,
            hash: short_hash(&hash),
            tools,
            surfaces: observed.surfaces,
        });
        let tool_count = observed.tool_count as u32;
        if was_down {
            batch.notifications.push(Notification::transition(
                derive_id(OutputKind::Transition, &key.to_string(), record.position),
                &snapshot.project,
                &snapshot.server,
                NotificationKind::Up,
                record.appended_at,
                format!("{tool_count} tools"),
            ));
        }
        batch.servers.push(server_row(
            &snapshot.project,
            &snapshot.server,
            state,
            Some(short_hash(&hash)),
            tool_count,
            snapshot.latency_ms,
            record.appended_at,
        ));
        dirty.server(key, record);
    }

    fn probe_failure(
        &mut self,
        failure: &ProbeFailure,
        record: &Delivered,
        batch: &mut Batch,
        dirty: &mut Dirty,
    ) {
        let key = failure.key();
        let state = state_of(&mut self.servers, &key, || self.keys_held.server_added(&key));
        if state.down.is_none() {
            batch.notifications.push(Notification::transition(
                derive_id(OutputKind::Transition, &key.to_string(), record.position),
                &failure.project,
                &failure.server,
                NotificationKind::Down,
                record.appended_at,
                failure.error.clone(),
            ));
        }
        state.probe_failed(&failure.error);
        let (hash, count) = list_summary(state.observed.as_ref().or(state.baseline.as_ref()));
        batch.servers.push(server_row(
            &failure.project,
            &failure.server,
            state,
            hash,
            count,
            None,
            record.appended_at,
        ));
        dirty.server(key, record);
    }

    fn call(
        &mut self,
        call: ToolCallRecord,
        key: ToolKey,
        record: &Delivered,
        batch: &mut Batch,
        dirty: &mut Dirty,
    ) {
        let thresholds = self.thresholds_of(&call.project);
        let state = state_of(&mut self.tools, &key, || self.keys_held.tool_added(&key));
        state.last_seen = Some(record.appended_at);
        if let Some(firing) = state.shape.observe((&call).into(), &thresholds) {
            let signal = shape_drift::signal(&call, record.position, firing);
            tracing::info!(key = %key, fingerprint = %signal.fingerprint, ranking = signal.ranking.as_str(), "return shape drift");
            metrics::SHAPE_SIGNALS.with_label_values(&[signal.ranking.as_str()]).inc();
            batch.signals.push(signal);
        }
        let firing = state.contract.observe((&call).into(), &call.span_id, call.started_at, &thresholds);
        if let (Some(firing), Some(declared)) = (firing, state.contract.declared()) {
            let signal = contract::signal(&call, record.position, firing, declared);
            let paths: Vec<String> = signal.reasons.iter().map(ToString::to_string).collect();
            tracing::info!(key = %key, fingerprint = %signal.fingerprint, declared = %signal.baseline_hash, reasons = ?paths, "returns mismatch the declared output");
            metrics::MISMATCH_SIGNALS.inc();
            batch.notifications.push(Notification::output_mismatch(&signal));
            batch.signals.push(signal);
        }
        batch.calls.push((
            derive_id(OutputKind::ToolCall, &key.to_string(), record.position),
            record.position,
            call,
        ));
        dirty.tool(key, record);
    }

    /// A tool's declared output schema changed (published by its server's detector).
    fn declaration(&mut self, declaration: &OutputDeclaration, record: &Delivered, dirty: &mut Dirty) {
        let key = declaration.key();
        let state = state_of(&mut self.tools, &key, || self.keys_held.tool_added(&key));
        state.last_seen = Some(record.appended_at);
        if state.contract.declare(declaration) {
            tracing::info!(key = %key, declared = ?declaration.schema_hash, sequence = declaration.sequence, "declared output applied");
        } else {
            tracing::debug!(key = %key, sequence = declaration.sequence, "declared output already held");
        }
        dirty.tool(key, record);
    }

    fn command(
        &mut self,
        command: OperatorCommand,
        record: &Delivered,
        batch: &mut Batch,
        dirty: &mut Dirty,
        declarations: &mut Vec<Message>,
    ) {
        let result = match &command {
            OperatorCommand::AcceptBaseline { project, server, accepted_by, .. } => {
                let key = ServerKey::new(project.clone(), server.clone());
                let context =
                    RecordContext { project, server, position: record.position, at: record.appended_at };
                let (outputs, state) = match self.servers.get_mut(&key) {
                    Some(state) => {
                        let before = DeclaredBefore::of(state);
                        let outputs = state.accept(accepted_by, context);
                        let changed = before.changes(state);
                        declarations.extend(declaration_messages(project, server, changed, record));
                        (outputs, Some(state))
                    }
                    None => (Vec::new(), None),
                };
                let acceptance = outputs.iter().find_map(|o| match o {
                    ToolListOutput::BaselineAccepted(a) => Some(a.clone()),
                    _ => None,
                });
                if let Some(state) = state {
                    if acceptance.is_some() {
                        let (hash, count) = list_summary(state.baseline.as_ref());
                        batch.servers.push(server_row(
                            project,
                            server,
                            state,
                            hash,
                            count,
                            None,
                            record.appended_at,
                        ));
                        dirty.server(key, record);
                    }
                }
                apply_outputs(outputs, batch);
                let result = AcceptResult {
                    server_name: server.to_string(),
                    accepted: acceptance.is_some(),
                    previous_hash: acceptance.as_ref().map(|a| a.previous_hash.clone()),
                    new_hash: acceptance.as_ref().map(|a| a.new_hash.clone()),
                    event_ids: acceptance.map(|a| a.event_ids).unwrap_or_default(),
                    accepted_by: accepted_by.clone(),
                };
                json!(result)
            }
            OperatorCommand::SetThresholds { project, thresholds, .. } => match thresholds
                .validate()
                .map_err(|err| err.to_string())
                .and_then(|()| self.within_state_budget(project, thresholds))
            {
                Ok(()) => {
                    self.thresholds.insert(project.clone(), *thresholds);
                    batch.settings.push((project.to_string(), *thresholds));
                    for (key, state) in self.tools.iter_mut().filter(|(k, _)| k.project == *project) {
                        state.shape.fit_to(thresholds.history_window);
                        state.contract.shrink_to(thresholds.history_window);
                        dirty.tools.entry(key.clone()).or_default();
                    }
                    json!({"thresholds": thresholds})
                }
                Err(err) => json!({"error": err}),
            },
            OperatorCommand::ForgetServer { project, server, by, .. } => {
                let key = ServerKey::new(project.clone(), server.clone());
                let held = self.forget_server(&key, batch);
                tracing::info!(key = %key, held, %by, "server state forgotten");
                json!({"server": server, "forgotten": held})
            }
            OperatorCommand::ForgetTool { project, server, tool, by, .. } => {
                let key = ToolKey { project: project.clone(), server: server.clone(), tool: tool.clone() };
                let held = self.forget_tool(&key, batch);
                tracing::info!(key = %key, held, %by, "tool state forgotten");
                json!({"server": server, "tool": tool, "forgotten": held})
            }
        };
        tracing::info!(command = command.id(), key = %command.key(), "operator command applied");
        batch.applied_commands.push((command.id().to_owned(), record.appended_at, result));
    }

    /// Drops a tool's state (and a quarantine of its key): its project's limits count it no more, and the
    /// store drops its state and shape view with this batch. Whether there was any.
    fn forget_tool(&mut self, key: &ToolKey, batch: &mut Batch) -> bool {
        let quarantined = self.quarantined.remove(&key.to_string()).is_some();
        let held = self.tools.remove(key).is_some();
        self.tool_streams.remove(key);
        if held {
            self.keys_held.tool_removed(key);
        }
        if held || quarantined {
            batch.forgotten.push(Forgotten::Tool(key.clone()));
            metrics::QUARANTINED_KEYS.set(self.quarantined.len() as i64);
        }
        held || quarantined
    }

    /// [`Worker::forget_tool`] for a server: its baselines and lists go, the next list starts afresh.
    fn forget_server(&mut self, key: &ServerKey, batch: &mut Batch) -> bool {
        let quarantined = self.quarantined.remove(&key.to_string()).is_some();
        let held = self.servers.remove(key).is_some();
        self.server_streams.remove(key);
        self.list_texts.retain(|listed| listed != key);
        if held {
            self.keys_held.server_removed(key);
        }
        if held || quarantined {
            batch.forgotten.push(Forgotten::Server(key.clone()));
            metrics::QUARANTINED_KEYS.set(self.quarantined.len() as i64);
        }
        held || quarantined
    }

    /// Forgets the tools whose last call is older than `forget_unseen_tools_after` at `now` (bus time),
    /// at most once a minute of bus time. A tool restored from state stored without `last_seen` counts
    /// from now (written with this batch).
    fn forget_unseen_tools(&mut self, now: Timestamp, batch: &mut Batch, dirty: &mut Dirty) {
        let after = self.settings.forget_unseen_tools_after;
        let every = (after / 10).clamp(Duration::from_millis(100), Duration::from_secs(60));
        if self.swept_at.is_some_and(|at| now.as_millis() - at.as_millis() < every.as_millis() as i64) {
            return;
        }
        self.swept_at = Some(now);
        let cutoff = now.as_millis().saturating_sub(after.as_millis() as i64);
        let mut unseen = Vec::new();
        for (key, state) in &mut self.tools {
            match state.last_seen {
                Some(at) if at.as_millis() < cutoff => unseen.push(key.clone()),
                Some(_) => {}
                None => {
                    state.last_seen = Some(now);
                    let stream = self.tool_streams.get(key).copied();
                    dirty.tools.insert(key.clone(), stream);
                }
            }
        }
        for key in &unseen {
            self.forget_tool(key, batch);
            dirty.tools.remove(key);
        }
        if !unseen.is_empty() {
            metrics::FORGOTTEN_TOOLS.inc_by(unseen.len() as u64);
            tracing::info!(
                tools = unseen.len(),
                unseen_for_seconds = after.as_secs(),
                "tools unseen too long forgotten"
            );
        }
    }

    /// Whether the tools `project` holds would stay within `limits.max_state_bytes_per_project` under
    /// `thresholds`, each at its worst case: an admin's settings may not put them beyond it.
    fn within_state_budget(
        &self,
        project: &ProjectName,
        thresholds: &DetectorThresholds,
    ) -> Result<(), String> {
        let per_tool = driftline_detectors::tool_state_worst_case_bytes(thresholds);
        let held = self.keys_held.tools_of(project);
        let budget = self.settings.keys.state_bytes;
        let fit = keys::tools_within(budget, per_tool);
        match held <= fit {
            true => Ok(()),
            false => Err(format!(
                "history_window = {} with tool_return_value_max_bytes = {} lets a tool hold up to {per_tool} bytes of detector state, so limits.max_state_bytes_per_project = {budget} holds {fit} tools; this project holds {held}: free some (driftline forget) or choose smaller settings",
                thresholds.history_window, thresholds.tool_return_value_max_bytes
            )),
        }
    }

    /// Serialises every state a record changed, once per batch, with the views the API reads; each key
    /// belongs to the stream of the last record that touched it.
    fn flush_state(&mut self, batch: &mut Batch, dirty: &Dirty) -> Result<(), WorkerError> {
        for (key, stream) in &dirty.servers {
            if let (Some(stream), true) = (stream, self.servers.contains_key(key)) {
                self.server_streams.insert(key.clone(), *stream);
            }
        }
        for (key, stream) in &dirty.tools {
            if let (Some(stream), true) = (stream, self.tools.contains_key(key)) {
                self.tool_streams.insert(key.clone(), *stream);
            }
        }
        // A key forgotten and then seen again within the batch is written, not forgotten.
        let (servers, tools) = (&self.servers, &self.tools);
        batch.forgotten.retain(|forgotten| match forgotten {
            Forgotten::Server(key) => !servers.contains_key(key),
            Forgotten::Tool(key) => !tools.contains_key(key),
        });
        let row = |kind: &str, key: String, stream: Option<&u32>, json: String| DetectorState {
            kind: kind.to_owned(),
            key,
            stream: stream.copied().unwrap_or_default(),
            state: json,
        };
        for key in dirty.servers.keys() {
            if let Some(state) = self.servers.get(key) {
                let json = serde_json::to_string(state)
                    .map_err(|err| WorkerError::State { key: key.to_string(), reason: err.to_string() })?;
                batch.states.push(row("server", key.to_string(), self.server_streams.get(key), json));
            }
        }
        for key in dirty.tools.keys() {
            let Some(state) = self.tools.get(key) else { continue };
            let json = serde_json::to_string(state)
                .map_err(|err| WorkerError::State { key: key.to_string(), reason: err.to_string() })?;
            batch.states.push(row("tool", key.to_string(), self.tool_streams.get(key), json));
            let thresholds = self.thresholds_of(&key.project);
            batch.tool_shapes.push(ToolShapeRow {
                project: key.project.to_string(),
                shape: tool_view(&key.server, &key.tool, state, &thresholds),
            });
        }
        Ok(())
    }
}

/// Every project's stored settings; a row whose project is not a valid name (written by hand) is skipped.
fn project_settings(rows: Vec<(String, DetectorThresholds)>) -> HashMap<ProjectName, DetectorThresholds> {
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

/// A span record, read.
enum SpanRecord {
    Call {
        identity: String,
        call: Box<ToolCallRecord>,
        repeat: bool,
    },
    /// A tool's declared output schema, published by the detector of its server.
    Declaration(Box<OutputDeclaration>),
    /// An operator command about one tool (forgetting it), in order with its calls.
    Command(Box<OperatorCommand>),
    Unusable(String),
}

/// A server's baseline before a record, to tell which declared outputs the record changed (read only when
/// the baseline did change: most records leave it as it was).
struct DeclaredBefore {
    hash: Option<String>,
    tools: Option<Arc<ToolsText>>,
}

impl DeclaredBefore {
    fn of(state: &ServerState) -> Self {
        DeclaredBefore {
            hash: state.baseline.as_ref().map(|b| b.hash.clone()),
            tools: state.baseline.as_ref().map(|b| Arc::clone(&b.tools)),
        }
    }

    /// The declarations to publish after the record: those the baseline change altered, or, once, all of
    /// them for a server whose state never published any (the first baseline, or state stored by an older
    /// driftline).
    fn changes(self, state: &mut ServerState) -> Vec<(String, Option<DeclaredOutput>)> {
        let Some(baseline) = &state.baseline else { return Vec::new() };
        if !state.declarations_published {
            state.declarations_published = true;
            return changed_declarations(&BTreeMap::new(), &declared_outputs(&baseline.tools));
        }
        if self.hash.as_deref() == Some(baseline.hash.as_str()) {
            return Vec::new();
        }
        let before = self.tools.as_deref().map(declared_outputs).unwrap_or_default();
        changed_declarations(&before, &declared_outputs(&baseline.tools))
    }
}

/// Returns the heap's free memory to the system. A large tool list is parsed, diffed and stored as values
/// between the small allocations the state keeps, and glibc's malloc keeps what that freed: 20 servers whose
/// 2.9 MB lists drifted left 1.6 GB resident with 0.35 GB in use (0.34 GB once trimmed).
fn release_freed_memory(list_bytes: usize) {
    let started = std::time::Instant::now();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of glibc's heap to the system; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
    tracing::debug!(
        list_bytes,
        took_ms = started.elapsed().as_millis() as u64,
        "freed memory returned after large tool lists"
    );
}

/// A declaration record, checked like any record from the bus.
fn read_declaration(record: &Delivered) -> SpanRecord {
    let read = serde_json::from_slice::<OutputDeclaration>(&record.payload)
        .map_err(|err| format!("not an output declaration: {err}"))
        .and_then(|declaration| {
            if declaration.kind != OUTPUT_DECLARATION {
                return Err(format!("an output declaration's type must be {OUTPUT_DECLARATION:?}"));
            }
            check_key(record, &declaration.key().to_string()).map(|()| declaration)
        });
    match read {
        Ok(declaration) => SpanRecord::Declaration(Box::new(declaration)),
        Err(reason) => SpanRecord::Unusable(reason),
    }
}

/// The declaration records of one baseline change (or of a whole baseline, `everything`), keyed by tool.
fn declaration_messages(
    project: &ProjectName,
    server: &ServerName,
    changed: Vec<(String, Option<DeclaredOutput>)>,
    record: &Delivered,
) -> Vec<Message> {
    changed
        .into_iter()
        .filter_map(|(tool, output)| {
            // A tool list may name tools that are not valid tool names: they get no calls either.
            let tool = ToolName::parse(tool).ok()?;
            let declaration = OutputDeclaration {
                schema_version: driftline_schemas::SCHEMA_VERSION,
                kind: OUTPUT_DECLARATION.to_owned(),
                project: project.clone(),
                server: server.clone(),
                tool,
                schema_hash: output.as_ref().map(|o| o.hash.clone()),
                output_schema: output.map(|o| o.schema),
                declared_at: record.appended_at,
                sequence: record.position.offset,
            };
            let key = declaration.key().to_string();
            serde_json::to_vec(&declaration).ok().map(|payload| Message { topic: Topic::Spans, key, payload })
        })
        .collect()
}

/// A record's key decides its partition, and the partition decides which detector holds the state: a
/// record keyed for another stream (or not keyed) would be counted in the wrong state, so it is refused.
fn check_key(record: &Delivered, expected: &str) -> Result<(), String> {
    if record.key.is_empty() {
        return Err(format!("the record has no key; it must be keyed {expected:?}"));
    }
    if record.key != expected {
        let shown: String = record.key.chars().take(200).collect();
        return Err(format!("key {shown:?} does not match the payload, which is keyed {expected:?}"));
    }
    Ok(())
}

fn dead_letter(record: &Delivered, reason: String) -> Message {
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

/// Keys whose state a batch changed, with the stream of the record that changed it (none when an
/// operator command did, which leaves the key where it is).
#[derive(Default)]
struct Dirty {
    servers: BTreeMap<ServerKey, Option<u32>>,
    tools: BTreeMap<ToolKey, Option<u32>>,
}

impl Dirty {
    fn server(&mut self, key: ServerKey, record: &Delivered) {
        self.servers.insert(key, Some(record.position.partition));
    }

    fn tool(&mut self, key: ToolKey, record: &Delivered) {
        self.tools.insert(key, Some(record.position.partition));
    }
}

fn apply_outputs(outputs: Vec<ToolListOutput>, batch: &mut Batch) {
    for output in outputs {
        match output {
            ToolListOutput::BaselineEstablished { hash, tool_count, security_flags } => {
                let high = security_flags
                    .iter()
                    .filter(|(_, f)| f.severity == driftline_schemas::Severity::High)
                    .count();
                tracing::info!(hash = %short_hash(&hash), tool_count, flags = security_flags.len(), high, "baseline established");
            }
            ToolListOutput::DriftEvent(event) => {
                tracing::info!(server = %event.server_name, id = %event.id, changes = event.changes.len(), max = ?event.max_classification, severity = ?event.max_severity, "tool-list drift");
                let classification = event.max_classification.map_or("none", |c| c.as_str());
                metrics::DRIFT_EVENTS.with_label_values(&[classification]).inc();
                if event.max_severity == Some(driftline_schemas::Severity::High) {
                    metrics::HIGH_SEVERITY_EVENTS.inc();
                }
                batch.notifications.push(Notification::drift(&event));
                batch.events.push(event);
            }
            ToolListOutput::EventClosed { event_id, status, by, at } => {
                batch.event_updates.push(EventUpdate { id: event_id, status, by, at });
            }
            ToolListOutput::BaselineAccepted(acceptance) => batch.acceptances.push(acceptance),
        }
    }
}

/// Short hash and tool count of a server's tool list.
fn list_summary(list: Option<&HashedTools>) -> (Option<String>, u32) {
    (list.map(|l| short_hash(&l.hash)), list.map_or(0, |l| l.tool_count() as u32))
}

fn server_row(
    project: &str,
    server: &str,
    state: &ServerState,
    hash: Option<String>,
    tool_count: u32,
    latency_ms: Option<f64>,
    at: Timestamp,
) -> ServerRow {
    let status = state.status();
    let note = match (&state.down, status) {
        (Some(error), _) => Some(error.clone()),
        (None, ServerStatus::Degraded) if state.held.is_some() => state.held.clone(),
        (None, ServerStatus::Degraded) => {
            let baseline = state.baseline.as_ref().map(|b| short_hash(&b.hash)).unwrap_or_default();
            let current =
                state.observed.as_ref().map(|o| short_hash(&o.hash)).unwrap_or_else(|| baseline.clone());
            Some(format!("schema drift: {baseline} → {current}"))
        }
        _ => None,
    };
    ServerRow {
        project: project.to_owned(),
        server_name: server.to_owned(),
        status,
        schema_hash: hash,
        tool_count,
        last_seen: Some(at),
        note,
        latency_ms,
    }
}

/// The API's view of a tool: its shape status, and how its returns meet its declared output (whether the
/// declaration admits the observed dominant shape is decided here, so the API runs no detection).
pub fn tool_view(server: &str, tool: &str, state: &ToolState, thresholds: &DetectorThresholds) -> ToolShape {
    let mut view = shape_view(server, tool, &state.shape, thresholds);
    view.contract = state.contract.view(thresholds).map(|mut contract| {
        if let (Some(declared), Some(shape)) = (state.contract.declared(), &view.baseline_shape) {
            (contract.observed_agrees, contract.disagreements) = contract::agrees(declared, shape);
        }
        contract
    });
    view
}

/// The API's view of a tool's shape status.
pub fn shape_view(
    server: &str,
    tool: &str,
    state: &ToolShapeState,
    thresholds: &DetectorThresholds,
) -> ToolShape {
    let status = state.status(thresholds);
    let (shape_state, baseline_shape, baseline_hash) = match &status {
        ShapeStatus::Priming { .. } => (ShapeState::Priming, None, None),
        ShapeStatus::Heterogeneous { .. } => (ShapeState::Heterogeneous, None, None),
        ShapeStatus::Stable { shape, hex8, .. } => {
            (ShapeState::Stable, Some(shape.clone()), Some(hex8.clone()))
        }
    };
    ToolShape {
        server: server.to_owned(),
        tool: tool.to_owned(),
        state: shape_state,
        status: status.to_string(),
        baseline_shape,
        baseline_hash,
        baseline_share: status.share(),
        window_size: state.window_size(),
        min_history_calls: thresholds.min_history_calls,
        history_window: thresholds.history_window,
        telemetry: state.telemetry,
        signal_groups: Vec::new(),
        contract: None,
    }
}
