//! The detector worker: reads the bus in order, runs both detectors per key, and hands the store one
//! batch per poll — outputs, changed state, and the input position they include (DESIGN.md §9).
//!
//! This is glue at the edge: detection itself lives in `driftline-detectors` and knows nothing of the bus
//! or the store. This file holds the loop (`resume`, `step`, `run`) and what the worker holds; each other
//! job has a module (ARCHITECTURE.md lists them).

mod dead_letters;
mod declarations;
mod decode;
mod events;
pub mod expiry;
mod fair;
mod forget;
mod handlers;
mod held;
mod in_flight;
pub mod keys;
mod metrics;
pub mod refusal;
pub mod repeats;
mod restore;
mod rollups;
mod state;
pub mod tool_lists;
mod views;

use keys::{KeyLimits, KeysHeld};
use tool_lists::ListTexts;

use dead_letters::dead_letter;
use held::Held;
use in_flight::InFlight;
use rollups::rollup_mark;
use state::Outputs;
pub use views::{shape_view, tool_view};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::events::{
    BatchClosedEarly, BatchRetried, DeclarationsPublished, Emit, OldestUnprocessed, RecordRead,
};
use driftline_bus::{BusError, Consumer, Delivered, Positions, Producer, Release};
use driftline_detectors::contract::ToolContractState;
use driftline_detectors::shape_drift::ToolShapeState;
use driftline_detectors::tool_drift::ServerState;
use driftline_schemas::{DetectorThresholds, ProjectName, ServerKey, Timestamp, ToolKey};
use driftline_store::rollup::RollupCache;
use driftline_store::{DetectorStore, StoreError};

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
/// `src/config/mod.rs` checks the same figure, written out there because the fuzz crate compiles it alone).
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
pub(crate) const LAG_REFRESH: Duration = Duration::from_millis(200);

/// Seconds since `at` by the wall clock (never negative: clocks of producers differ a little).
pub(crate) fn age_seconds(at: Timestamp) -> f64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    (now - at.as_millis()).max(0) as f64 / 1e3
}

pub struct Worker<C> {
    consumer: C,
    store: Arc<dyn DetectorStore>,
    settings: WorkerSettings,
    positions: Positions,
    servers: Held<ServerKey, ServerState>,
    tools: Held<ToolKey, ToolState>,
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

/// How often a member of a consumer group re-reads every project's thresholds from the store.
pub(crate) const SETTINGS_REFRESH: Duration = Duration::from_secs(10);

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
            servers: Held::default(),
            tools: Held::default(),
            keys_held: KeysHeld::default(),
            thresholds: HashMap::new(),
            dead_letters: 0,
            dead_letter_lines: driftline_schemas::LogBudget::default(),
            dead_letter_sink: None,
            declaration_sink: None,
            stale: false,
            in_flight: None,
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
                OldestUnprocessed(0.0).emit();
            }
            return Ok(Progress { records: 0 });
        }
        // The oldest record not processed yet is among those just read (each partition's next one).
        if let Some(oldest) = records.iter().map(|r| r.appended_at).min() {
            OldestUnprocessed(age_seconds(oldest)).emit();
        }
        // The gauge last read the bus while idle: a long first batch would leave it at 0 with these records
        // waiting. Only a gauge: a bus that cannot answer now does not fail the batch.
        let _ = self.report_lag().await;
        let mut out = Outputs::default();
        let mut dead = Vec::new();
        // Memory runs ahead of the store until this batch is stored.
        self.stale = true;
        if let Some(now) = records.iter().map(|r| r.appended_at).max() {
            self.forget_unseen_tools(now, &mut out);
        }
        // Taken one by one in the schedule's order, which names each record once.
        let mut inputs: Vec<Option<decode::Input>> =
            self.read_inputs(&records).await?.into_iter().map(Some).collect();
        let started = std::time::Instant::now();
        let (mut left, order) = fair::Schedule::new(&records);
        for index in order {
            let record = &records[index];
            if left.leaves(index, record, started.elapsed() >= self.settings.max_batch_time) {
                continue;
            }
            RecordRead(record).emit();
            if let Err(refusal) = self.process(
                record,
                inputs[index]
                    .take()
                    .unwrap_or_else(|| decode::Input::Unusable("record read twice".to_owned().into())),
                &mut out,
            ) {
                dead.push(dead_letter(record, refusal.reason));
            }
            out.batch.positions.insert(record.position.partition, record.position.offset);
        }
        let processed = records.len() - left.count();
        if left.count() > 0 {
            BatchClosedEarly { processed, carried: left.count(), streams: &left.streams() }.emit();
        }
        self.carried = left.take(records);
        let Outputs { mut batch, dirty, declarations } = out;
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
                DeclarationsPublished(count).emit();
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
        let identities = batch.call_identities.iter().map(|c| (c.identity.clone(), c.position)).collect();
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
                    BatchRetried { error: &err, retry_in_ms: backoff.as_millis() as u64 }.emit();
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
}
