//! The embedded bus: one append-only log table in its own SQLite file (WAL, synchronous FULL), one
//! partition, offsets are row ids. A publish is one transaction, so a batch is durable before ingest
//! answers 202, and it wakes waiting consumers in the same process. The log's only reader
//! ([`SqliteBus::sole_consumer`]) drops the records whose outputs it has made durable; offsets are never
//! reused (`AUTOINCREMENT`), so positions stay valid after records are dropped.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use driftline_schemas::{InputPosition, Timestamp};
use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::Notify;

use crate::{BusError, Consumer, Delivered, Message, Positions, Producer, Release, Topic};

#[derive(Clone)]
pub struct SqliteBus {
    connection: Arc<Mutex<Connection>>,
    /// Reads on a connection of their own: in WAL mode they neither wait for appends nor hold them up.
    reader: Arc<Mutex<Connection>>,
    /// Drops released records without a sync of its own (`synchronous = NORMAL`): a drop lost to a power
    /// cut leaves records that are before the stored positions, dropped again next time. It writes while
    /// holding the append lock, so appends and drops never wait on SQLite's busy handler.
    dropper: Arc<Mutex<Connection>>,
    appended: Arc<Notify>,
    clock: fn() -> i64,
    /// Payload bytes a poll stops at ([`crate::POLL_BYTES`]; smaller in tests).
    poll_bytes: usize,
}

impl SqliteBus {
    /// Opens (creating if needed) the log at `path`; `clock` gives the append time in Unix milliseconds.
    pub fn open(path: &Path, clock: fn() -> i64) -> Result<Self, BusError> {
        let connection = Connection::open(path)?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "FULL")?;
        connection.busy_timeout(Duration::from_secs(5))?;
        connection.execute_batch(
            "CREATE TABLE IF NOT EXISTS bus_log (
                 offset INTEGER PRIMARY KEY AUTOINCREMENT,
                 topic TEXT NOT NULL,
                 key TEXT NOT NULL,
                 payload BLOB NOT NULL,
                 appended_at INTEGER NOT NULL
             );",
        )?;
        let reader = Connection::open(path)?;
        reader.busy_timeout(Duration::from_secs(5))?;
        // The log is read front to back once: pages come through a mapping rather than being copied in by
        // a read call each (the detector on a 1M-span backlog spent a third of its reading thread there).
        reader.pragma_update(None, "mmap_size", 1i64 << 30)?;
        let dropper = Connection::open(path)?;
        dropper.pragma_update(None, "synchronous", "NORMAL")?;
        dropper.busy_timeout(Duration::from_secs(5))?;
        Ok(SqliteBus {
            connection: Arc::new(Mutex::new(connection)),
            reader: Arc::new(Mutex::new(reader)),
            dropper: Arc::new(Mutex::new(dropper)),
            appended: Arc::new(Notify::new()),
            clock,
            poll_bytes: crate::POLL_BYTES,
        })
    }

    /// The same log, its polls stopping at `bytes` of payload.
    pub fn with_poll_bytes(mut self, bytes: usize) -> Self {
        self.poll_bytes = bytes;
        self
    }

    /// A consumer of this log (several may read it independently; none drops records).
    pub fn consumer(&self) -> SqliteConsumer {
        SqliteConsumer { bus: self.clone(), drops_released: false }
    }

    /// The consumer of a log it alone reads: the records released through its [`Consumer::releaser`] are
    /// dropped.
    pub fn sole_consumer(&self) -> SqliteConsumer {
        SqliteConsumer { bus: self.clone(), drops_released: true }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Connection>, BusError> {
        self.connection.lock().map_err(|_| BusError::Unavailable("bus lock poisoned".into()))
    }

    fn lock_reader(&self) -> Result<std::sync::MutexGuard<'_, Connection>, BusError> {
        self.reader.lock().map_err(|_| BusError::Unavailable("bus lock poisoned".into()))
    }

    fn append(&self, messages: &[Message]) -> Result<(), BusError> {
        let now = (self.clock)();
        let mut connection = self.lock()?;
        let transaction = connection.transaction()?;
        {
            let mut insert = transaction.prepare_cached(
                "INSERT INTO bus_log (topic, key, payload, appended_at) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for message in messages {
                insert.execute(params![message.topic.as_str(), message.key, message.payload, now])?;
            }
        }
        transaction.commit()?;
        Ok(())
    }

    fn read(&self, after: Option<InputPosition>, max: usize) -> Result<Vec<Delivered>, BusError> {
        let after = after.map_or(0, |p| p.offset as i64);
        let connection = self.lock_reader()?;
        let mut select = connection.prepare_cached(
            "SELECT offset, topic, key, payload, appended_at FROM bus_log WHERE offset > ?1 ORDER BY offset LIMIT ?2",
        )?;
        let rows = select.query_map(params![after, max as i64], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get(2)?,
                row.get::<_, Vec<u8>>(3)?,
                row.get::<_, i64>(4)?,
            ))
        })?;
        let mut delivered = Vec::new();
        let mut bytes = 0;
        for row in rows {
            if bytes >= self.poll_bytes {
                break;
            }
            let (offset, topic, key, payload, appended_at) = row?;
            let offset = offset as u64;
            let topic = Topic::parse(&topic)
                .ok_or_else(|| BusError::Corrupt { offset, reason: format!("unknown topic {topic:?}") })?;
            let appended_at = Timestamp::from_millis(appended_at)
                .ok_or_else(|| BusError::Corrupt { offset, reason: "append time out of range".into() })?;
            bytes += payload.len();
            delivered.push(Delivered {
                topic,
                key,
                payload,
                position: InputPosition { partition: 0, offset },
                appended_at,
            });
        }
        Ok(delivered)
    }

    /// Drops the records at or before `through`, a bounded run per transaction so appends wait for no
    /// more than one run; answers how many were dropped.
    fn drop_through(&self, through: u64) -> Result<u64, BusError> {
        let through = i64::try_from(through).unwrap_or(i64::MAX);
        let mut dropped = 0;
        loop {
            let appends = self.lock()?;
            let connection =
                self.dropper.lock().map_err(|_| BusError::Unavailable("bus lock poisoned".into()))?;
            let removed = connection
                .prepare_cached(
                    "DELETE FROM bus_log WHERE offset <= ?1 AND offset < \
                     (SELECT MIN(offset) FROM bus_log) + ?2",
                )?
                .execute(params![through, DROP_RUN])?;
            drop((connection, appends));
            dropped += removed as u64;
            if removed == 0 {
                return Ok(dropped);
            }
        }
    }

    /// The number of records the log holds.
    pub fn record_count(&self) -> Result<u64, BusError> {
        let connection = self.lock_reader()?;
        let count: i64 = connection.query_row("SELECT COUNT(*) FROM bus_log", [], |row| row.get(0))?;
        Ok(count as u64)
    }

    /// The newest offset the log has given a record, whether or not the record was dropped since.
    pub fn end_offset(&self) -> Result<u64, BusError> {
        let connection = self.lock_reader()?;
        // `AUTOINCREMENT` keeps the largest offset ever used here (absent before the first record).
        let end: Option<i64> = connection
            .query_row("SELECT seq FROM sqlite_sequence WHERE name = 'bus_log'", [], |row| row.get(0))
            .optional()?;
        Ok(end.unwrap_or(0) as u64)
    }
}

#[async_trait]
impl Producer for SqliteBus {
    async fn publish(&self, messages: Vec<Message>) -> Result<(), BusError> {
        let bus = self.clone();
        tokio::task::spawn_blocking(move || bus.append(&messages))
            .await
            .map_err(|err| BusError::Unavailable(format!("publish task failed: {err}")))??;
        self.appended.notify_waiters();
        Ok(())
    }
}

/// Offsets dropped per transaction: an append waits for one such run at most.
const DROP_RUN: i64 = 10_000;

pub struct SqliteConsumer {
    bus: SqliteBus,
    /// The log's only reader: what it releases is dropped.
    drops_released: bool,
}

#[async_trait]
impl Consumer for SqliteConsumer {
    async fn poll(
        &mut self,
        positions: &Positions,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivered>, BusError> {
        // One log, one partition: 0.
        let after = positions.get(&0).map(|&offset| InputPosition { partition: 0, offset });
        // Register interest before reading, so an append between the read and the wait is not missed.
        let appended = self.bus.appended.clone();
        let notified = appended.notified();
        let records = read_blocking(&self.bus, after, max).await?;
        if !records.is_empty() {
            return Ok(records);
        }
        let _ = tokio::time::timeout(wait, notified).await;
        read_blocking(&self.bus, after, max).await
    }

    async fn rewind(&mut self, _positions: &Positions) -> Result<(), BusError> {
        // Every poll reads after the positions it is given: nothing to do.
        Ok(())
    }

    async fn lag(&self, positions: &Positions) -> Result<std::collections::BTreeMap<String, u64>, BusError> {
        let bus = self.bus.clone();
        let end = tokio::task::spawn_blocking(move || bus.end_offset())
            .await
            .map_err(|err| BusError::Unavailable(format!("read task failed: {err}")))??;
        let lag = end.saturating_sub(positions.get(&0).copied().unwrap_or(0));
        Ok(std::collections::BTreeMap::from([("log/0".to_owned(), lag)]))
    }

    fn releaser(&self) -> Option<Arc<dyn Release>> {
        self.drops_released.then(|| Arc::new(Dropper(self.bus.clone())) as Arc<dyn Release>)
    }
}

/// Drops released records from the log (the sole consumer's [`Consumer::releaser`]).
struct Dropper(SqliteBus);

#[async_trait]
impl Release for Dropper {
    async fn release(&self, positions: &Positions) -> Result<u64, BusError> {
        let Some(&through) = positions.get(&0) else { return Ok(0) };
        let bus = self.0.clone();
        tokio::task::spawn_blocking(move || bus.drop_through(through))
            .await
            .map_err(|err| BusError::Unavailable(format!("release task failed: {err}")))?
    }
}

async fn read_blocking(
    bus: &SqliteBus,
    after: Option<InputPosition>,
    max: usize,
) -> Result<Vec<Delivered>, BusError> {
    let bus = bus.clone();
    tokio::task::spawn_blocking(move || bus.read(after, max))
        .await
        .map_err(|err| BusError::Unavailable(format!("read task failed: {err}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The path of a new log (its directory emptied) for test `name`.
    fn fresh_log(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("driftline-bus-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir.join("bus.db")
    }

    fn message(topic: Topic, key: &str, payload: &str) -> Message {
        Message { topic, key: key.into(), payload: payload.as_bytes().to_vec() }
    }

    #[tokio::test]
    async fn publishes_durably_and_reads_in_order_after_a_position() {
        let path = fresh_log("order");
        let bus = SqliteBus::open(&path, || 1_000).expect("open");
        bus.publish(vec![message(Topic::Spans, "p/s/t", "1"), message(Topic::ToolLists, "p/s", "2")])
            .await
            .expect("publish");
        bus.publish(vec![message(Topic::Commands, "p/s", "3")]).await.expect("publish");

        // A second handle on the same file sees everything: it was committed before publish returned.
        let reopened = SqliteBus::open(&path, || 0).expect("reopen");
        let mut consumer = reopened.consumer();
        let all = consumer.poll(&Positions::new(), 10, Duration::ZERO).await.expect("poll");
        let payloads: Vec<&[u8]> = all.iter().map(|d| d.payload.as_slice()).collect();
        assert_eq!(payloads, [b"1", b"2", b"3"]);
        assert_eq!(all[1].topic, Topic::ToolLists);
        assert_eq!(all[0].appended_at.as_millis(), 1_000);
        let after_first = Positions::from([(0, all[0].position.offset)]);
        let rest = consumer.poll(&after_first, 1, Duration::ZERO).await.expect("poll");
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].position, all[1].position);
        assert_eq!(reopened.end_offset().expect("end"), all[2].position.offset);
        assert_eq!(consumer.lag(&after_first).await.expect("lag").get("log/0"), Some(&2));
    }

    /// A poll takes records until their payloads reach the budget, however many it may take: large
    /// records make small batches, and a record larger than the budget still comes alone.
    #[tokio::test]
    async fn a_poll_stops_at_its_payload_bytes() {
        let path = fresh_log("bytes");
        let bus = SqliteBus::open(&path, || 0).expect("open").with_poll_bytes(1_000);
        let sizes = [400, 400, 400, 5_000, 10];
        bus.publish(sizes.iter().map(|&n| message(Topic::Spans, "k", &"x".repeat(n))).collect())
            .await
            .expect("publish");
        let mut consumer = bus.consumer();
        let mut positions = Positions::new();
        let mut batches = Vec::new();
        loop {
            let got = consumer.poll(&positions, 100, Duration::ZERO).await.expect("poll");
            let Some(last) = got.last() else { break };
            positions.insert(0, last.position.offset);
            batches.push(got.iter().map(|d| d.payload.len()).collect::<Vec<_>>());
        }
        assert_eq!(batches, [vec![400, 400, 400], vec![5_000], vec![10]]);
    }

    /// The sole consumer's released records leave the log in runs, later ones stay, and offsets go on
    /// from where they were (a position stays valid); an ordinary consumer has nothing to release with.
    #[tokio::test]
    async fn the_sole_consumer_drops_what_it_released() {
        let path = fresh_log("release");
        let bus = SqliteBus::open(&path, || 0).expect("open");
        let count = 2 * DROP_RUN as usize + 5;
        bus.publish((0..count).map(|n| message(Topic::Spans, "k", &n.to_string())).collect())
            .await
            .expect("publish");
        let end = bus.end_offset().expect("end");
        let through = end - 3;

        let shared = Positions::from([(0, through)]);
        assert!(bus.consumer().releaser().is_none(), "not the only reader");

        let mut sole = bus.sole_consumer();
        let dropper = sole.releaser().expect("the only reader");
        assert_eq!(dropper.release(&Positions::new()).await.expect("release"), 0, "nothing stored yet");
        assert_eq!(dropper.release(&shared).await.expect("release"), count as u64 - 3);
        assert_eq!(bus.record_count().expect("count"), 3);
        assert_eq!(dropper.release(&shared).await.expect("release"), 0, "released twice");
        let rest = sole.poll(&shared, 10, Duration::ZERO).await.expect("poll");
        let offsets: Vec<u64> = rest.iter().map(|d| d.position.offset).collect();
        assert_eq!(offsets, [end - 2, end - 1, end]);

        // Emptied, the log still numbers new records after the last one.
        let all = Positions::from([(0, end)]);
        assert_eq!(dropper.release(&all).await.expect("release"), 3);
        assert_eq!(bus.record_count().expect("count"), 0);
        assert_eq!(bus.end_offset().expect("end"), end, "an emptied log keeps its end");
        assert_eq!(sole.lag(&all).await.expect("lag")["log/0"], 0);
        bus.publish(vec![message(Topic::Spans, "k", "new")]).await.expect("publish");
        let reopened = SqliteBus::open(&path, || 0).expect("reopen");
        let new = reopened.sole_consumer().poll(&all, 10, Duration::ZERO).await.expect("poll");
        assert_eq!(new.iter().map(|d| d.position.offset).collect::<Vec<_>>(), [end + 1]);
    }

    #[tokio::test]
    async fn a_waiting_consumer_wakes_on_publish() {
        let path = fresh_log("wake");
        let bus = SqliteBus::open(&path, || 0).expect("open");
        let mut consumer = bus.consumer();
        let publisher = bus.clone();
        let started = std::time::Instant::now();
        let waiting =
            tokio::spawn(async move { consumer.poll(&Positions::new(), 10, Duration::from_secs(10)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        publisher.publish(vec![message(Topic::Spans, "k", "x")]).await.expect("publish");
        let got = waiting.await.expect("join").expect("poll");
        assert_eq!(got.len(), 1);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the consumer waited for its timeout instead of waking"
        );
    }
}
