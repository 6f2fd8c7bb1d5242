//! The embedded bus: an append-only log in its own SQLite file (WAL, synchronous FULL), one partition.
//! A publish is one transaction, so a batch is durable before ingest answers 202, and it wakes waiting
//! consumers in the same process. Offsets are numbered by the log (`bus_meta.next_offset`) and never
//! reused, so positions stay valid after records are dropped.
//!
//! Records live in segment tables of [`SEGMENT_RECORDS`] consecutive offsets (`bus_segment_<n>`). The
//! log's only reader ([`SqliteBus::sole_consumer`]) drops the records whose outputs it has made durable:
//! a segment wholly released is dropped as a table, which frees its pages without touching its rows (a
//! `DELETE` of each row cost the embedded detector about a fifth of its speed on a backlog); rows of the
//! segment still being written are deleted one by one only once the reader is near the end of the log.
//! A log written before segments (`bus_log`) is read first and dropped whole once released. An emptied
//! log with [`SHRINK_FREE_BYTES`] free is rewritten smaller, so a burst's backlog does not keep its disk.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use driftline_schemas::{InputPosition, Timestamp};
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use tokio::sync::Notify;

use crate::{BusError, Consumer, Delivered, Message, Positions, Producer, Release, Topic};

/// Consecutive offsets per segment table of a new log (an existing log keeps the figure it was made with).
pub const SEGMENT_RECORDS: u64 = 16_384;

/// Rows deleted per transaction from the segment being read (near the end of the log): an append waits for
/// one such run at most.
const DROP_RUN: i64 = 10_000;

/// Free space in `bus.db` past which the log, once it holds no more than a segment, is rewritten smaller
/// (`VACUUM`): a burst's backlog would otherwise keep its disk space for good. Below it, and while a
/// backlog waits, appends reuse the freed pages.
const SHRINK_FREE_BYTES: i64 = 64 << 20;

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
    /// Free pages, in bytes, past which a log without a backlog gives its file back ([`SHRINK_FREE_BYTES`]).
    shrink_free_bytes: i64,
}

/// Where the log stands, read in the transaction that uses it (`bus_meta`).
#[derive(Clone, Copy, Debug)]
struct Layout {
    /// The offset the next record gets (1 in a new log).
    next_offset: u64,
    /// The last offset of a log written before segments (`bus_log`), 0 if there was none.
    legacy_end: u64,
    segment_records: u64,
}

impl Layout {
    fn read(connection: &Connection) -> Result<Layout, BusError> {
        let (next_offset, legacy_end, segment_records) = connection.query_row(
            "SELECT next_offset, legacy_end, segment_records FROM bus_meta WHERE id = 0",
            [],
            |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?, row.get::<_, i64>(2)?)),
        )?;
        if next_offset < 1 || legacy_end < 0 || segment_records < 1 {
            return Err(BusError::Corrupt { offset: 0, reason: "bus_meta out of range".into() });
        }
        Ok(Layout {
            next_offset: next_offset as u64,
            legacy_end: legacy_end as u64,
            segment_records: segment_records as u64,
        })
    }

    /// The segment holding `offset` (past the legacy log).
    fn segment_of(&self, offset: u64) -> u64 {
        (offset - 1) / self.segment_records
    }

    /// The last offset segment `segment` may hold.
    fn segment_end(&self, segment: u64) -> u64 {
        (segment + 1) * self.segment_records
    }

    /// Where the records at and after `offset` are: the table and the last offset it may hold.
    fn table_of(&self, offset: u64) -> (Table, u64) {
        if offset <= self.legacy_end {
            (Table::Legacy, self.legacy_end)
        } else {
            let segment = self.segment_of(offset);
            (Table::Segment(segment), self.segment_end(segment))
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Table {
    Legacy,
    Segment(u64),
}

impl Table {
    fn name(self) -> String {
        match self {
            Table::Legacy => "bus_log".to_owned(),
            Table::Segment(segment) => format!("bus_segment_{segment}"),
        }
    }
}

/// The record tables the log holds now, oldest first.
fn tables(connection: &Connection) -> Result<BTreeSet<Table>, BusError> {
    let mut select = connection.prepare_cached(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND (name = 'bus_log' OR name LIKE 'bus_segment_%')",
    )?;
    let names = select.query_map([], |row| row.get::<_, String>(0))?;
    let mut tables = BTreeSet::new();
    for name in names {
        let name = name?;
        if name == "bus_log" {
            tables.insert(Table::Legacy);
        } else if let Some(segment) = name.strip_prefix("bus_segment_").and_then(|n| n.parse().ok()) {
            tables.insert(Table::Segment(segment));
        }
    }
    Ok(tables)
}

fn count_rows(connection: &Connection, table: Table) -> Result<u64, BusError> {
    let count: i64 =
        connection.query_row(&format!("SELECT COUNT(*) FROM {}", table.name()), [], |row| row.get(0))?;
    Ok(count as u64)
}

impl SqliteBus {
    /// Opens (creating if needed) the log at `path`; `clock` gives the append time in Unix milliseconds.
    pub fn open(path: &Path, clock: fn() -> i64) -> Result<Self, BusError> {
        Self::open_with_segments(path, clock, SEGMENT_RECORDS)
    }

    /// [`SqliteBus::open`], a new log made with segments of `segment_records` offsets (an existing log
    /// keeps the figure it was made with).
    pub fn open_with_segments(
        path: &Path,
        clock: fn() -> i64,
        segment_records: u64,
    ) -> Result<Self, BusError> {
        let mut connection = Connection::open(path)?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "FULL")?;
        connection.busy_timeout(Duration::from_secs(5))?;
        let setup = connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        setup.execute_batch(
            "CREATE TABLE IF NOT EXISTS bus_meta (
                 id INTEGER PRIMARY KEY CHECK (id = 0),
                 next_offset INTEGER NOT NULL,
                 legacy_end INTEGER NOT NULL,
                 segment_records INTEGER NOT NULL
             );",
        )?;
        let made: Option<i64> =
            setup.query_row("SELECT id FROM bus_meta", [], |row| row.get(0)).optional()?;
        let legacy = tables(&setup)?.contains(&Table::Legacy);
        if made.is_none() {
            // A log written before segments goes on from its last offset (`AUTOINCREMENT` kept the
            // largest ever used, also when its records were dropped).
            let mut legacy_end = 0;
            if legacy {
                let sequence: Option<i64> = setup
                    .query_row("SELECT seq FROM sqlite_sequence WHERE name = 'bus_log'", [], |row| row.get(0))
                    .optional()?;
                let newest: Option<i64> =
                    setup.query_row("SELECT MAX(offset) FROM bus_log", [], |row| row.get(0))?;
                legacy_end = sequence.unwrap_or(0).max(newest.unwrap_or(0)).max(0);
            }
            setup.execute(
                "INSERT INTO bus_meta (id, next_offset, legacy_end, segment_records) VALUES (0, ?1, ?2, ?3)",
                params![legacy_end + 1, legacy_end, segment_records.clamp(1, i64::MAX as u64) as i64],
            )?;
        }
        if legacy && count_rows(&setup, Table::Legacy)? == 0 {
            setup.execute_batch("DROP TABLE bus_log")?;
        }
        setup.commit()?;
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
            shrink_free_bytes: SHRINK_FREE_BYTES,
        })
    }

    /// The same log, its polls stopping at `bytes` of payload.
    pub fn with_poll_bytes(mut self, bytes: usize) -> Self {
        self.poll_bytes = bytes;
        self
    }

    /// The same log, shrinking its file once `bytes` of it are free (smaller in tests).
    pub fn with_shrink_at(mut self, bytes: i64) -> Self {
        self.shrink_free_bytes = bytes;
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
        let transaction = connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let layout = Layout::read(&transaction)?;
        let mut offset = layout.next_offset;
        let mut rest = messages;
        while !rest.is_empty() {
            let segment = layout.segment_of(offset);
            let room = usize::try_from(layout.segment_end(segment) - offset + 1).unwrap_or(usize::MAX);
            let (run, after) = rest.split_at(room.min(rest.len()));
            let table = Table::Segment(segment).name();
            transaction.execute_batch(&format!(
                "CREATE TABLE IF NOT EXISTS {table} (
                     offset INTEGER PRIMARY KEY,
                     topic TEXT NOT NULL,
                     key TEXT NOT NULL,
                     payload BLOB NOT NULL,
                     appended_at INTEGER NOT NULL
                 );"
            ))?;
            let mut insert = transaction.prepare_cached(&format!(
                "INSERT INTO {table} (offset, topic, key, payload, appended_at) VALUES (?1, ?2, ?3, ?4, ?5)"
            ))?;
            for message in run {
                insert.execute(params![
                    offset as i64,
                    message.topic.as_str(),
                    message.key,
                    message.payload,
                    now
                ])?;
                offset += 1;
            }
            rest = after;
        }
        transaction.execute("UPDATE bus_meta SET next_offset = ?1 WHERE id = 0", params![offset as i64])?;
        transaction.commit()?;
        Ok(())
    }

    fn read(&self, after: Option<InputPosition>, max: usize) -> Result<Vec<Delivered>, BusError> {
        let mut connection = self.lock_reader()?;
        // One snapshot: the layout and the records it says exist.
        let snapshot = connection.transaction()?;
        let layout = Layout::read(&snapshot)?;
        let present = tables(&snapshot)?;
        let mut delivered = Vec::new();
        let mut bytes = 0;
        let mut from = after.map_or(0, |p| p.offset) + 1;
        while from < layout.next_offset && delivered.len() < max && bytes < self.poll_bytes {
            let (table, last) = layout.table_of(from);
            // A table absent from the range was dropped: its records were released, so none is wanted.
            if present.contains(&table) {
                let mut select = snapshot.prepare_cached(&format!(
                    "SELECT offset, topic, key, payload, appended_at FROM {} WHERE offset >= ?1 ORDER BY offset LIMIT ?2",
                    table.name()
                ))?;
                let rows = select.query_map(params![from as i64, (max - delivered.len()) as i64], |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, String>(1)?,
                        row.get(2)?,
                        row.get::<_, Vec<u8>>(3)?,
                        row.get::<_, i64>(4)?,
                    ))
                })?;
                for row in rows {
                    if bytes >= self.poll_bytes {
                        break;
                    }
                    let (offset, topic, key, payload, appended_at) = row?;
                    let offset = offset as u64;
                    let topic = Topic::parse(&topic).ok_or_else(|| BusError::Corrupt {
                        offset,
                        reason: format!("unknown topic {topic:?}"),
                    })?;
                    let appended_at = Timestamp::from_millis(appended_at).ok_or_else(|| {
                        BusError::Corrupt { offset, reason: "append time out of range".into() }
                    })?;
                    bytes += payload.len();
                    delivered.push(Delivered {
                        topic,
                        key,
                        payload,
                        position: InputPosition { partition: 0, offset },
                        appended_at,
                    });
                }
            }
            from = last + 1;
        }
        snapshot.commit()?;
        Ok(delivered)
    }

    /// Drops the records at or before `through`, oldest table first, one table or run of rows per
    /// transaction so appends wait for no more than one; answers how many were dropped.
    fn drop_through(&self, through: u64) -> Result<u64, BusError> {
        let mut dropped = 0;
        while let Some(removed) = self.drop_oldest(through)? {
            dropped += removed;
        }
        // The drops are done and stay done: a shrink that fails is tried again after the next ones.
        if dropped > 0 {
            if let Err(err) = self.shrink_if_idle() {
                tracing::warn!(error = %err, "embedded log file not shrunk");
            }
        }
        Ok(dropped)
    }

    /// Drops the oldest table if wholly released, or a run of its released rows near the end of the log;
    /// answers how many records went, `None` when nothing more goes.
    fn drop_oldest(&self, through: u64) -> Result<Option<u64>, BusError> {
        let appends = self.lock()?;
        let mut connection =
            self.dropper.lock().map_err(|_| BusError::Unavailable("bus lock poisoned".into()))?;
        let transaction = connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let layout = Layout::read(&transaction)?;
        let Some(&oldest) = tables(&transaction)?.first() else { return Ok(None) };
        let last = match oldest {
            Table::Legacy => layout.legacy_end,
            Table::Segment(segment) => layout.segment_end(segment),
        };
        let (removed, whole) = if last <= through && last < layout.next_offset {
            // Wholly released and written no more: the table goes, its rows untouched.
            let rows = count_rows(&transaction, oldest)?;
            transaction.execute_batch(&format!("DROP TABLE {}", oldest.name()))?;
            (rows, true)
        } else if layout.next_offset.saturating_sub(through.saturating_add(1)) < layout.segment_records {
            // The reader is near the end of the log: the released rows of the segment it reads go
            // one by one (on a backlog they wait for their whole segment, which is cheaper).
            (delete_run(&transaction, oldest, through)?, false)
        } else {
            (0, false)
        };
        transaction.commit()?;
        drop((connection, appends));
        Ok((removed > 0 || whole).then_some(removed))
    }

    /// Rewrites the file without its free pages when they pass the threshold and the log holds no more
    /// than a segment (a near-empty log is copied in moments; appends wait for it).
    fn shrink_if_idle(&self) -> Result<(), BusError> {
        let appends = self.lock()?;
        let connection =
            self.dropper.lock().map_err(|_| BusError::Unavailable("bus lock poisoned".into()))?;
        let pragma = |name: &str| -> Result<i64, BusError> {
            Ok(connection.query_row(&format!("PRAGMA {name}"), [], |row| row.get(0))?)
        };
        let (free, page) = (pragma("freelist_count")?, pragma("page_size")?);
        if free.saturating_mul(page) < self.shrink_free_bytes {
            return Ok(());
        }
        let layout = Layout::read(&connection)?;
        let present = tables(&connection)?;
        if present.len() > 2 {
            // More than a segment's worth (counting a backlog's rows would read all of it).
            return Ok(());
        }
        let mut records = 0;
        for table in present {
            records += count_rows(&connection, table)?;
        }
        if records > layout.segment_records {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let before = pragma("page_count")?;
        connection.execute_batch("VACUUM")?;
        // In WAL mode the rewrite lands in the log: a checkpoint that truncates it gives the space back.
        connection.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
        let after = pragma("page_count")?;
        drop((connection, appends));
        tracing::info!(
            records,
            freed_mb = (before - after).max(0).saturating_mul(page) >> 20,
            took_ms = started.elapsed().as_millis() as u64,
            "embedded log file shrunk"
        );
        Ok(())
    }

    /// The number of records the log holds.
    pub fn record_count(&self) -> Result<u64, BusError> {
        let mut connection = self.lock_reader()?;
        let snapshot = connection.transaction()?;
        let mut count = 0;
        for table in tables(&snapshot)? {
            count += count_rows(&snapshot, table)?;
        }
        Ok(count)
    }

    /// The newest offset the log has given a record, whether or not the record was dropped since.
    pub fn end_offset(&self) -> Result<u64, BusError> {
        let connection = self.lock_reader()?;
        Ok(Layout::read(&connection)?.next_offset - 1)
    }
}

/// Deletes up to [`DROP_RUN`] rows at or before `through` from `table`, front first.
fn delete_run(transaction: &Transaction<'_>, table: Table, through: u64) -> Result<u64, BusError> {
    let through = i64::try_from(through).unwrap_or(i64::MAX);
    let name = table.name();
    let removed = transaction
        .prepare_cached(&format!(
            "DELETE FROM {name} WHERE offset <= ?1 AND offset < (SELECT MIN(offset) FROM {name}) + ?2"
        ))?
        .execute(params![through, DROP_RUN])?;
    Ok(removed as u64)
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

    /// The offsets of what a consumer gets after `after`, at most `max`.
    async fn offsets_after(bus: &SqliteBus, after: u64, max: usize) -> Vec<u64> {
        let positions = Positions::from([(0, after)]);
        let got = bus.consumer().poll(&positions, max, Duration::ZERO).await.expect("poll");
        got.iter().map(|d| d.position.offset).collect()
    }

    /// Reads go on from one segment table to the next, within one poll and from a position in between.
    #[tokio::test]
    async fn reads_cross_segments() {
        let path = fresh_log("segments");
        let bus = SqliteBus::open_with_segments(&path, || 0, 4).expect("open");
        for batch in [3, 1, 6] {
            bus.publish((0..batch).map(|n| message(Topic::Spans, "k", &n.to_string())).collect())
                .await
                .expect("publish");
        }
        assert_eq!(offsets_after(&bus, 0, 100).await, (1..=10).collect::<Vec<_>>());
        assert_eq!(offsets_after(&bus, 3, 2).await, [4, 5], "a limit across a boundary");
        assert_eq!(offsets_after(&bus, 8, 100).await, [9, 10]);
        assert_eq!(offsets_after(&bus, 10, 100).await, Vec::<u64>::new());
        // A reopened log keeps its segment size, whatever the opener asks for.
        let reopened = SqliteBus::open_with_segments(&path, || 0, 1_000).expect("reopen");
        reopened.publish(vec![message(Topic::Spans, "k", "11")]).await.expect("publish");
        assert_eq!(offsets_after(&reopened, 0, 100).await, (1..=11).collect::<Vec<_>>());
        assert_eq!(reopened.record_count().expect("count"), 11);
    }

    /// On a backlog only wholly released segments go (as tables); near the end of the log the released
    /// rows of the segment being read go as well.
    #[tokio::test]
    async fn released_segments_go_whole_and_rows_only_near_the_end() {
        let path = fresh_log("segment-release");
        let bus = SqliteBus::open_with_segments(&path, || 0, 4).expect("open");
        bus.publish((1..=20).map(|n| message(Topic::Spans, "k", &n.to_string())).collect())
            .await
            .expect("publish");
        let dropper = bus.sole_consumer().releaser().expect("the only reader");
        let release = |through: u64| {
            let dropper = Arc::clone(&dropper);
            async move { dropper.release(&Positions::from([(0, through)])).await }
        };
        assert_eq!(release(9).await.expect("release"), 8, "segments 1-4 and 5-8; 9 waits for 10-12");
        assert_eq!(bus.record_count().expect("count"), 12);
        assert_eq!(offsets_after(&bus, 9, 100).await, (10..=20).collect::<Vec<_>>());
        assert_eq!(release(18).await.expect("release"), 10, "9-16 whole, then 17 and 18 near the end");
        assert_eq!(bus.record_count().expect("count"), 2);
        assert_eq!(offsets_after(&bus, 18, 100).await, [19, 20]);
        assert_eq!(release(20).await.expect("release"), 2, "17-20 written to its end: the table goes");
        assert_eq!(bus.record_count().expect("count"), 0);
        bus.publish(vec![message(Topic::Spans, "k", "21")]).await.expect("publish");
        assert_eq!(release(20).await.expect("release"), 0, "released twice");
        assert_eq!(offsets_after(&bus, 20, 100).await, [21]);
        assert_eq!(bus.record_count().expect("count"), 1);
        assert_eq!(bus.end_offset().expect("end"), 21);
    }

    /// A log written before segments (one `bus_log` table) is read first, numbered on from, and dropped
    /// whole once released; an emptied one goes at the next open.
    #[tokio::test]
    async fn a_log_from_before_segments_is_read_on_and_dropped() {
        let legacy = |name: &str, rows: i64, dropped_through: i64| {
            let path = fresh_log(name);
            let connection = Connection::open(&path).expect("open");
            connection
                .execute_batch(
                    "CREATE TABLE bus_log (offset INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL,
                     key TEXT NOT NULL, payload BLOB NOT NULL, appended_at INTEGER NOT NULL);",
                )
                .expect("legacy table");
            for n in 1..=rows {
                connection
                    .execute(
                        "INSERT INTO bus_log (topic, key, payload, appended_at) VALUES ('spans', 'k', ?1, 0)",
                        params![n.to_string().into_bytes()],
                    )
                    .expect("legacy row");
            }
            connection
                .execute("DELETE FROM bus_log WHERE offset <= ?1", params![dropped_through])
                .expect("drop");
            path
        };
        let path = legacy("legacy", 5, 2);
        let bus = SqliteBus::open_with_segments(&path, || 0, 4).expect("open");
        assert_eq!(offsets_after(&bus, 0, 100).await, [3, 4, 5]);
        bus.publish(vec![message(Topic::Spans, "k", "6"), message(Topic::Spans, "k", "7")])
            .await
            .expect("publish");
        let got = bus.consumer().poll(&Positions::from([(0, 4)]), 100, Duration::ZERO).await.expect("poll");
        let payloads: Vec<&[u8]> = got.iter().map(|d| d.payload.as_slice()).collect();
        assert_eq!(payloads, [b"5", b"6", b"7"], "from the old table into the segments");
        let dropper = bus.sole_consumer().releaser().expect("the only reader");
        assert_eq!(dropper.release(&Positions::from([(0, 4)])).await.expect("release"), 2, "3 and 4");
        assert_eq!(dropper.release(&Positions::from([(0, 5)])).await.expect("release"), 1, "the old table");
        assert_eq!(bus.record_count().expect("count"), 2);
        assert_eq!(offsets_after(&bus, 0, 100).await, [6, 7]);

        let emptied = legacy("legacy-emptied", 5, 5);
        let bus = SqliteBus::open_with_segments(&emptied, || 0, 4).expect("open");
        assert_eq!(bus.end_offset().expect("end"), 5);
        bus.publish(vec![message(Topic::Spans, "k", "6")]).await.expect("publish");
        assert_eq!(offsets_after(&bus, 0, 100).await, [6]);
        let tables = tables(&Connection::open(&emptied).expect("open")).expect("tables");
        assert_eq!(tables, BTreeSet::from([Table::Segment(1)]), "the emptied old table is gone");
    }

    /// A log emptied of a burst gives its file back; one still holding a backlog keeps it for the appends.
    #[tokio::test]
    async fn an_emptied_log_shrinks_its_file() {
        let path = fresh_log("shrink");
        let bus = SqliteBus::open_with_segments(&path, || 0, 16).expect("open").with_shrink_at(256 << 10);
        let payload = "x".repeat(4_096);
        bus.publish((0..400).map(|_| message(Topic::Spans, "k", &payload)).collect()).await.expect("publish");
        let pages = || -> i64 {
            let connection = Connection::open(&path).expect("open");
            connection.query_row("PRAGMA page_count", [], |row| row.get(0)).expect("pages")
        };
        let full = pages();
        let dropper = bus.sole_consumer().releaser().expect("the only reader");
        assert_eq!(dropper.release(&Positions::from([(0, 200)])).await.expect("release"), 192);
        assert_eq!(pages(), full, "a backlog of 208 records: the freed pages wait for appends");
        assert_eq!(dropper.release(&Positions::from([(0, 400)])).await.expect("release"), 208);
        let emptied = pages();
        assert!(emptied * 20 < full, "{full} pages before, {emptied} after");
        let wal = std::fs::metadata(path.with_extension("db-wal")).map_or(0, |m| m.len());
        assert!(wal < 1 << 20, "the log's WAL was truncated: {wal} bytes");
        // The log goes on where it was.
        bus.publish(vec![message(Topic::Spans, "k", "after")]).await.expect("publish");
        assert_eq!(offsets_after(&bus, 400, 10).await, [401]);
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
