//! The seam between ingest and the detectors (DESIGN.md §1, §8): keyed records, ordered per key, durable
//! once `publish` returns. The embedded implementation is a log in SQLite; the Kafka one plugs in behind
//! the same traits.

mod kafka;
mod partition;
mod sqlite;

use std::collections::BTreeMap;

use async_trait::async_trait;
use driftline_schemas::{InputPosition, Timestamp};

/// The last processed offset of each input partition (`InputPosition::partition` → offset).
pub type Positions = BTreeMap<u32, u64>;

/// A poll returns records until their payloads reach this many bytes (at least one record), whatever
/// number it may take: a detector batch of 20,000 records is a few MB of ordinary spans, but could be
/// gigabytes of records near the size limits.
pub const POLL_BYTES: usize = 64 << 20;

pub use kafka::{stream, ClientProperties, KafkaBus, KafkaGroupConsumer, KafkaSettings};
pub use partition::{murmur2, partition_for_key};
pub use sqlite::SqliteBus;

/// The topics of DESIGN.md §8 (without the `driftline.` prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Topic {
    /// ToolListSnapshot, key `project/server`.
    ToolLists,
    /// ToolCallRecord (or a raw ToolCallSpan from another producer), key `project/server/tool`.
    Spans,
    /// Operator commands (accept a baseline, change thresholds), key `project/server` or `project`.
    Commands,
    /// Input records the detectors could not use, with the reason (DeadLetter); never consumed by them.
    DeadLetters,
}

impl Topic {
    pub fn as_str(self) -> &'static str {
        match self {
            Topic::ToolLists => "tool-lists",
            Topic::Spans => "spans",
            Topic::Commands => "commands",
            Topic::DeadLetters => "dead-letters",
        }
    }

    pub fn parse(name: &str) -> Option<Topic> {
        [Topic::ToolLists, Topic::Spans, Topic::Commands, Topic::DeadLetters]
            .into_iter()
            .find(|t| t.as_str() == name)
    }
}

/// A record to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub topic: Topic,
    pub key: String,
    pub payload: Vec<u8>,
}

/// A record as a consumer receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub topic: Topic,
    pub key: String,
    pub payload: Vec<u8>,
    pub position: InputPosition,
    /// When the bus accepted the record: the ingest time that `detected_at` reports.
    pub appended_at: Timestamp,
}

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("bus storage failed: {0}")]
    Storage(#[from] rusqlite::Error),
    #[error("bus is unavailable: {0}")]
    Unavailable(String),
    #[error("corrupt record at offset {offset}: {reason}")]
    Corrupt { offset: u64, reason: String },
}

/// Publishes records; when `publish` returns Ok every record is durable (acknowledged data is never lost).
#[async_trait]
pub trait Producer: Send + Sync {
    /// Appends all messages, in order, or none of them.
    async fn publish(&self, messages: Vec<Message>) -> Result<(), BusError>;
}

/// Reads records in order per partition, after positions the caller keeps (with its outputs, so a restart
/// resumes exactly where the last durable batch ended).
#[async_trait]
pub trait Consumer: Send {
    /// Up to `max` records after `positions` (from the start of a partition it does not name), waiting up
    /// to `wait` for the first; no more once their payloads reach [`POLL_BYTES`].
    async fn poll(
        &mut self,
        positions: &Positions,
        max: usize,
        wait: std::time::Duration,
    ) -> Result<Vec<Delivered>, BusError>;

    /// Records on the bus after `positions` (consumer lag), per partition this consumer reads, named
    /// `topic/partition`.
    async fn lag(&self, positions: &Positions) -> Result<BTreeMap<String, u64>, BusError>;

    /// Reads from `positions` again on the next poll (after a batch that was not stored).
    async fn rewind(&mut self, positions: &Positions) -> Result<(), BusError>;

    /// The streams this consumer reads: `None` for every stream (the only reader), or the partitions a
    /// consumer group assigned to it.
    fn owned(&self) -> Option<Vec<u32>> {
        None
    }

    /// Ownership changes since the last call (consumer groups). Records of newly assigned streams are held
    /// back until the caller took the change, so it can load their state first.
    fn take_rebalance(&mut self) -> Option<Rebalance> {
        None
    }

    /// Tells the group how far the caller's stored outputs go (after they are durable), so a new owner
    /// re-reads little. The stored positions stay the truth: records at or before them are skipped.
    async fn commit(&mut self, _positions: &Positions) -> Result<(), BusError> {
        Ok(())
    }

    /// Where a log this consumer alone reads can drop the records whose outputs the caller made durable
    /// (its disk use stays that of its backlog); `None` for a shared log (Kafka: the topics' retention).
    /// A handle of its own, so the caller can release beside its polls rather than between them.
    fn releaser(&self) -> Option<std::sync::Arc<dyn Release>> {
        None
    }
}

/// Drops the records of a log that the caller alone reads ([`Consumer::releaser`]).
#[async_trait]
pub trait Release: Send + Sync {
    /// The caller's outputs through `positions` are durable: drops the records at or before them.
    /// Answers how many were dropped.
    async fn release(&self, positions: &Positions) -> Result<u64, BusError>;
}

/// Streams a consumer group moved to or away from this consumer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebalance {
    pub assigned: Vec<u32>,
    pub revoked: Vec<u32>,
}
