//! The Kafka bus (DESIGN.md §8): an idempotent producer (acks=all) that returns only after every record's
//! delivery report, and a consumer-group member (cooperative-sticky) for the detectors. The worker's stored
//! positions are the truth: a new owner of a partition loads them with the state, and records at or before
//! them are skipped; offsets committed to the group after each stored batch only shorten the re-read.
//!
//! Partitions of the three topics are numbered into one space, `InputPosition::partition` = topic index
//! × 65536 + Kafka partition, so one position map covers them all.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use driftline_schemas::{InputPosition, Timestamp};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer as _, ConsumerContext, Rebalance as KafkaRebalance,
};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{BorrowedMessage, Message as _};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::{BusError, Consumer, Delivered, Message, Positions, Producer, Rebalance, Topic};

/// The detectors' input topics.
const TOPICS: [Topic; 3] = [Topic::ToolLists, Topic::Spans, Topic::Commands];
/// Every topic `driftline topics create` makes.
const ALL_TOPICS: [Topic; 4] = [Topic::ToolLists, Topic::Spans, Topic::Commands, Topic::DeadLetters];

/// Ingest answers 503 when the broker has not acknowledged a batch by then (the client retries; a batch
/// that was late rather than lost may then arrive twice).
const PUBLISH_DEADLINE: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct KafkaSettings {
    /// `host:port[,host:port…]`
    pub brokers: String,
    /// Prepended to each topic name: `driftline.` gives `driftline.spans`.
    pub topic_prefix: String,
    /// Partitions of each topic when `ensure_topics` creates it.
    pub partitions: u32,
    pub replication: u32,
    /// A detector that stops heartbeating loses its partitions after this long.
    pub session_timeout_ms: u32,
    /// Static group membership (`group.instance.id`): unique per detector instance, stable across restarts.
    pub instance_id: Option<String>,
    /// librdkafka properties every client gets (security protocol, SASL, TLS).
    pub client_properties: ClientProperties,
}

/// librdkafka properties as `(key, value)`. They carry the SASL and key passwords: `Debug` shows `***` for
/// the value of every key that names a password.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClientProperties(pub Vec<(String, String)>);

impl std::fmt::Debug for ClientProperties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = self.0.iter().map(|(key, value)| {
            (key.as_str(), if key.contains("password") { "***" } else { value.as_str() })
        });
        f.debug_list().entries(shown).finish()
    }
}

impl KafkaSettings {
    pub fn topic_name(&self, topic: Topic) -> String {
        format!("{}{}", self.topic_prefix, topic.as_str())
    }

    /// A client configuration for the brokers with the security properties.
    fn client(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.brokers);
        for (key, value) in &self.client_properties.0 {
            config.set(key, value);
        }
        config
    }
}

/// The stream number of a topic's partition: topic index × 65536 + partition.
pub fn stream(topic: Topic, partition: i32) -> u32 {
    let index = TOPICS.iter().position(|t| *t == topic).unwrap_or(0) as u32;
    (index << 16) | (partition.max(0) as u32 & 0xffff)
}

fn unavailable(err: impl std::fmt::Display) -> BusError {
    BusError::Unavailable(err.to_string())
}

#[derive(Clone)]
pub struct KafkaBus {
    producer: FutureProducer,
    settings: KafkaSettings,
}

impl KafkaBus {
    pub fn connect(settings: KafkaSettings) -> Result<Self, BusError> {
        let producer = settings
            .client()
            .set("enable.idempotence", "true")
            // The Java clients' partitioner (console producer, Streams, Connect, Spring): a key lands on
            // the partition any producer following the documentation picks, so one tool's records stay
            // on one partition, with one detector.
            .set("partitioner", "murmur2_random")
            .set("acks", "all")
            .set("compression.type", "lz4")
            .set("linger.ms", "5")
            .set("message.timeout.ms", "5000")
            .create()
            .map_err(unavailable)?;
        Ok(KafkaBus { producer, settings })
    }

    /// Creates the topics with the configured partitions where they do not exist yet.
    pub async fn ensure_topics(&self) -> Result<Vec<String>, BusError> {
        let admin: AdminClient<DefaultClientContext> =
            self.settings.client().create().map_err(unavailable)?;
        let names: Vec<String> = ALL_TOPICS.iter().map(|t| self.settings.topic_name(*t)).collect();
        let topics: Vec<NewTopic<'_>> = names
            .iter()
            .map(|name| {
                NewTopic::new(
                    name,
                    self.settings.partitions as i32,
                    TopicReplication::Fixed(self.settings.replication as i32),
                )
            })
            .collect();
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(15)));
        let results = admin.create_topics(&topics, &options).await.map_err(unavailable)?;
        let mut created = Vec::new();
        for result in results {
            match result {
                Ok(name) => created.push(name),
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => {
                    return Err(BusError::Unavailable(format!("cannot create topic {name}: {code}")))
                }
            }
        }
        Ok(created)
    }

    /// Whether a broker answers a metadata request within two seconds (readiness).
    pub async fn ping(&self) -> Result<(), BusError> {
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || {
            producer.client().fetch_metadata(None, Duration::from_secs(2)).map(|_| ()).map_err(unavailable)
        })
        .await
        .map_err(unavailable)?
    }

    /// Each topic with its partition count (0 when it does not exist).
    pub fn describe_topics(&self) -> Result<Vec<(String, usize)>, BusError> {
        let consumer = self.consumer()?;
        ALL_TOPICS
            .iter()
            .map(|topic| {
                let name = self.settings.topic_name(*topic);
                let metadata = consumer
                    .consumer
                    .fetch_metadata(Some(&name), Duration::from_secs(10))
                    .map_err(unavailable)?;
                let partitions = metadata.topics().first().map_or(0, |t| t.partitions().len());
                Ok((name, partitions))
            })
            .collect()
    }

    /// A member of the detectors' consumer group (`<prefix>detectors`) over the three input topics.
    pub fn consumer(&self) -> Result<KafkaGroupConsumer, BusError> {
        let events = Arc::new(Mutex::new(GroupEvents::default()));
        let context = GroupContext { settings: self.settings.clone(), events: events.clone() };
        let mut config = self.settings.client();
        config
            .set("group.id", format!("{}detectors", self.settings.topic_prefix))
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set("session.timeout.ms", self.settings.session_timeout_ms.to_string())
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false");
        if let Some(id) = &self.settings.instance_id {
            // Static membership: a restarted instance takes its partitions back without a rebalance.
            config.set("group.instance.id", id);
        }
        let consumer: BaseConsumer<GroupContext> =
            config.create_with_context(context).map_err(unavailable)?;
        Ok(KafkaGroupConsumer {
            consumer: Arc::new(consumer),
            settings: self.settings.clone(),
            events,
            subscribed: false,
            acknowledged: BTreeSet::new(),
            held: VecDeque::new(),
            lag: Arc::default(),
        })
    }
}

#[async_trait]
impl Producer for KafkaBus {
    async fn publish(&self, messages: Vec<Message>) -> Result<(), BusError> {
        let names: Vec<String> = messages.iter().map(|m| self.settings.topic_name(m.topic)).collect();
        let deliveries = messages.iter().zip(&names).map(|(message, topic)| {
            let record =
                FutureRecord::to(topic).key(message.key.as_bytes()).payload(message.payload.as_slice());
            self.producer.send(record, Duration::from_secs(5))
        });
        // All sends run at once (a send does nothing until polled); every record is acknowledged by the
        // broker (acks=all) before this returns.
        let results = tokio::time::timeout(PUBLISH_DEADLINE, futures_util::future::join_all(deliveries))
            .await
            .map_err(|_| {
                unavailable(format!("the broker did not acknowledge within {PUBLISH_DEADLINE:?}"))
            })?;
        for result in results {
            result.map_err(|(err, _)| unavailable(err))?;
        }
        Ok(())
    }
}

/// Partition ownership as the group's rebalance callbacks report it.
#[derive(Default)]
struct GroupEvents {
    /// Streams assigned to this member now.
    assigned: BTreeSet<u32>,
    /// Changes the worker has not taken yet.
    pending: Rebalance,
    rebalances: u64,
}

struct GroupContext {
    settings: KafkaSettings,
    events: Arc<Mutex<GroupEvents>>,
}

impl ClientContext for GroupContext {}

/// The high watermark of a partition as the latest fetch response reported it: librdkafka keeps it per
/// partition, so this costs no round trip. `None` before the first fetch.
fn fetched_high(consumer: &BaseConsumer<GroupContext>, topic: &str, partition: i32) -> Option<i64> {
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer is valid while `consumer` lives; `topic` is a NUL-terminated string that
    // outlives the call; `low` and `high` are valid for writes.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
}

impl ConsumerContext for GroupContext {
    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &KafkaRebalance<'_>) {
        let Ok(mut events) = self.events.lock() else { return };
        let streams = |list: &TopicPartitionList| -> Vec<u32> {
            list.elements()
                .iter()
                .filter_map(|e| topic_of(&self.settings, e.topic()).map(|t| stream(t, e.partition())))
                .collect()
        };
        match rebalance {
            KafkaRebalance::Assign(list) => {
                let assigned = streams(list);
                events.rebalances += 1;
                tracing::info!(partitions = ?assigned, "kafka partitions assigned");
                for s in assigned {
                    events.assigned.insert(s);
                    events.pending.revoked.retain(|r| *r != s);
                    events.pending.assigned.push(s);
                }
            }
            KafkaRebalance::Revoke(list) => {
                let revoked = streams(list);
                events.rebalances += 1;
                tracing::info!(partitions = ?revoked, "kafka partitions revoked");
                for s in revoked {
                    events.assigned.remove(&s);
                    events.pending.assigned.retain(|a| *a != s);
                    events.pending.revoked.push(s);
                }
            }
            KafkaRebalance::Error(err) => tracing::warn!(error = %err, "kafka rebalance failed"),
        }
    }
}

/// A detector's membership in the consumer group. librdkafka's consumer is polled on a blocking thread: its
/// async stream can miss a wake-up when a poll times out, which delays records until the next one arrives.
pub struct KafkaGroupConsumer {
    consumer: Arc<BaseConsumer<GroupContext>>,
    settings: KafkaSettings,
    events: Arc<Mutex<GroupEvents>>,
    subscribed: bool,
    /// Streams whose assignment the worker has taken (it holds their state).
    acknowledged: BTreeSet<u32>,
    /// Records of streams assigned but not yet taken by the worker, in arrival order.
    held: VecDeque<Delivered>,
    lag: Arc<Mutex<LagCache>>,
}

/// Each partition's high watermark at the last refresh.
#[derive(Default)]
struct LagCache {
    refreshed: Option<std::time::Instant>,
    refreshing: bool,
    marks: Vec<(u32, i64)>,
    /// Before this member's first assignment: records waiting past the group's committed offset, for every
    /// partition of the input topics.
    unowned: Vec<(u32, u64)>,
}

/// The `topic/partition` label of a stream's lag series (topic without the prefix).
fn lag_label(settings: &KafkaSettings, stream: u32) -> Option<String> {
    let (topic, partition) = kafka_partition(settings, stream)?;
    let topic = topic.strip_prefix(&settings.topic_prefix).unwrap_or(&topic).to_owned();
    Some(format!("{topic}/{partition}"))
}

/// What the whole group has not processed yet, per input partition: high watermark minus the group's
/// committed offset (the low watermark where none is committed). Round trips: run off the async threads.
/// A partition the broker did not answer for this time (a topic just created, a metadata or watermark
/// timeout) keeps its figure from `previous`, so the gauge does not lose partitions for a refresh.
fn group_backlog(
    consumer: &BaseConsumer<GroupContext>,
    settings: &KafkaSettings,
    previous: &[(u32, u64)],
) -> Vec<(u32, u64)> {
    let timeout = Duration::from_secs(2);
    let mut partitions = TopicPartitionList::new();
    for topic in TOPICS {
        let name = settings.topic_name(topic);
        let Ok(metadata) = consumer.fetch_metadata(Some(&name), timeout) else { continue };
        for found in metadata.topics().iter().filter(|t| t.error().is_none()) {
            for partition in found.partitions() {
                partitions.add_partition(&name, partition.id());
            }
        }
    }
    let committed = consumer.committed_offsets(partitions.clone(), timeout).unwrap_or(partitions);
    let mut waiting: BTreeMap<u32, u64> = previous.iter().copied().collect();
    for element in committed.elements() {
        let Some(topic) = topic_of(settings, element.topic()) else { continue };
        let Ok((low, high)) = consumer.fetch_watermarks(element.topic(), element.partition(), timeout) else {
            continue;
        };
        let start = match element.offset() {
            Offset::Offset(offset) => offset.max(low),
            _ => low,
        };
        waiting.insert(stream(topic, element.partition()), (high - start).max(0) as u64);
    }
    waiting.into_iter().collect()
}

const LAG_REFRESH: Duration = Duration::from_secs(1);

fn topic_of(settings: &KafkaSettings, name: &str) -> Option<Topic> {
    TOPICS.into_iter().find(|t| settings.topic_name(*t) == name)
}

fn kafka_partition(settings: &KafkaSettings, stream: u32) -> Option<(String, i32)> {
    let topic = TOPICS.get((stream >> 16) as usize)?;
    Some((settings.topic_name(*topic), (stream & 0xffff) as i32))
}

fn delivered(settings: &KafkaSettings, message: &BorrowedMessage<'_>) -> Result<Delivered, BusError> {
    let offset = message.offset().max(0) as u64;
    let topic = topic_of(settings, message.topic()).ok_or_else(|| BusError::Corrupt {
        offset,
        reason: format!("unexpected topic {}", message.topic()),
    })?;
    let appended_at = message
        .timestamp()
        .to_millis()
        .and_then(Timestamp::from_millis)
        .ok_or_else(|| BusError::Corrupt { offset, reason: "record without a timestamp".into() })?;
    Ok(Delivered {
        topic,
        key: String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned(),
        payload: message.payload().unwrap_or_default().to_vec(),
        position: InputPosition { partition: stream(topic, message.partition()), offset },
        appended_at,
    })
}

impl KafkaGroupConsumer {
    /// Subscribes once every input topic exists (a topic created a moment ago may take a little while to
    /// show in the metadata). Metadata requests block, so they run off the async threads.
    async fn subscribe(&mut self) -> Result<(), BusError> {
        let (consumer, settings) = (self.consumer.clone(), self.settings.clone());
        tokio::task::spawn_blocking(move || {
            let names: Vec<String> = TOPICS.iter().map(|t| settings.topic_name(*t)).collect();
            for name in &names {
                let mut partitions = 0;
                for attempt in 0..40 {
                    let metadata =
                        consumer.fetch_metadata(Some(name), Duration::from_secs(5)).map_err(unavailable)?;
                    partitions = metadata.topics().first().map_or(0, |t| t.partitions().len());
                    if partitions > 0 || attempt == 39 {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
                if partitions == 0 {
                    return Err(BusError::Unavailable(format!(
                        "topic {name} does not exist: run `driftline topics create`"
                    )));
                }
            }
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            consumer.subscribe(&names).map_err(unavailable)
        })
        .await
        .map_err(unavailable)??;
        self.subscribed = true;
        Ok(())
    }

    fn assigned(&self) -> BTreeSet<u32> {
        self.events.lock().map(|e| e.assigned.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl Consumer for KafkaGroupConsumer {
    async fn poll(
        &mut self,
        _positions: &Positions,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivered>, BusError> {
        if !self.subscribed {
            self.subscribe().await?;
        }
        let fetched = if self.held.iter().any(|r| self.acknowledged.contains(&r.position.partition)) {
            Vec::new()
        } else {
            let (consumer, settings) = (self.consumer.clone(), self.settings.clone());
            tokio::task::spawn_blocking(move || {
                let mut records = Vec::new();
                let mut limit = wait;
                let mut bytes = 0;
                while records.len() < max && bytes < crate::POLL_BYTES {
                    match consumer.poll(limit) {
                        Some(Ok(message)) => {
                            let record = delivered(&settings, &message)?;
                            bytes += record.payload.len();
                            records.push(record);
                        }
                        // Consumer errors report the connection (a broker down, a transport failure):
                        // librdkafka reconnects by itself, so they mean "nothing to read now".
                        Some(Err(err)) => {
                            tracing::warn!(error = %err, "kafka consumer reports an error; retrying");
                            break;
                        }
                        None => break,
                    }
                    // After the first record, take only what is already fetched.
                    limit = Duration::ZERO;
                }
                Ok::<_, BusError>(records)
            })
            .await
            .map_err(unavailable)??
        };
        // Hand out only records of streams the worker holds the state of, in order per stream; hold those
        // of streams it has not taken yet; drop those of streams revoked meanwhile (their new owner reads
        // them from the group's committed offset).
        let assigned = self.assigned();
        let mut ready = Vec::new();
        let mut waiting = VecDeque::new();
        for record in self.held.drain(..).chain(fetched) {
            let stream = record.position.partition;
            if !assigned.contains(&stream) {
                continue;
            }
            let behind = waiting.iter().any(|r: &Delivered| r.position.partition == stream);
            if self.acknowledged.contains(&stream) && !behind {
                ready.push(record);
            } else {
                waiting.push_back(record);
            }
        }
        self.held = waiting;
        Ok(ready)
    }

    async fn lag(&self, positions: &Positions) -> Result<BTreeMap<String, u64>, BusError> {
        // Three sources of each partition's high watermark, the largest wins: the latest fetch response
        // (librdkafka keeps it, no round trip; fresh while the consumer fetches, which it does whenever it
        // is behind), the broker's answer to a watermark query, which a background task refreshes every
        // second (a round trip per partition) while this answers at once from the last refresh, and the
        // records fetched and held here. A position past a stale mark cannot hide a backlog: the fetch
        // response that brought the records in reported a mark above them.
        let mut slot = self.lag.lock().map_err(|_| BusError::Unavailable("lag lock poisoned".into()))?;
        let stale = slot.refreshed.is_none_or(|at| at.elapsed() >= LAG_REFRESH);
        if stale && !slot.refreshing {
            slot.refreshing = true;
            let (consumer, settings, shared) =
                (self.consumer.clone(), self.settings.clone(), self.lag.clone());
            let joined = self.events.lock().map_or(true, |e| e.rebalances > 0);
            let previous = slot.unowned.clone();
            tokio::task::spawn_blocking(move || {
                let mut marks = Vec::new();
                let unowned =
                    if joined { Vec::new() } else { group_backlog(&consumer, &settings, &previous) };
                if let Ok(assignment) = consumer.assignment() {
                    for element in assignment.elements() {
                        let Some(topic) = topic_of(&settings, element.topic()) else { continue };
                        match consumer.fetch_watermarks(
                            element.topic(),
                            element.partition(),
                            Duration::from_secs(2),
                        ) {
                            Ok((_, high)) => marks.push((stream(topic, element.partition()), high)),
                            Err(err) => tracing::debug!(error = %err, "watermarks not fetched"),
                        }
                    }
                }
                if let Ok(mut slot) = shared.lock() {
                    *slot = LagCache {
                        refreshed: Some(std::time::Instant::now()),
                        refreshing: false,
                        marks,
                        unowned,
                    };
                }
            });
        }
        if self.acknowledged.is_empty() && !slot.unowned.is_empty() {
            // Not a member yet: every partition may come here, and its records wait all the same.
            return Ok(slot
                .unowned
                .iter()
                .filter_map(|(stream, waiting)| Some((lag_label(&self.settings, *stream)?, *waiting)))
                .collect());
        }
        let mut highs: BTreeMap<u32, i64> = slot.marks.iter().copied().collect();
        // Taken just now, before a fetch or a refresh said where a partition ends: what the group had left
        // there when this member was still joining.
        let joining: BTreeMap<u32, u64> = slot.unowned.iter().copied().collect();
        drop(slot);
        for stream in &self.acknowledged {
            let Some((topic, partition)) = kafka_partition(&self.settings, *stream) else { continue };
            if let Some(high) = fetched_high(&self.consumer, &topic, partition) {
                let entry = highs.entry(*stream).or_insert(high);
                *entry = (*entry).max(high);
            }
        }
        // Records fetched and held back are on the bus too.
        for record in &self.held {
            let entry = highs.entry(record.position.partition).or_insert(0);
            *entry = (*entry).max(record.position.offset as i64 + 1);
        }
        let unknown = self.acknowledged.iter().filter(|stream| !highs.contains_key(stream));
        let unknown: Vec<(u32, u64)> =
            unknown.filter_map(|stream| Some((*stream, *joining.get(stream)?))).collect();
        Ok(highs
            .iter()
            .filter(|(stream, _)| self.acknowledged.contains(stream))
            .map(|(stream, high)| {
                let next = positions.get(stream).map_or(0, |&last| last as i64 + 1);
                (*stream, (high - next).max(0) as u64)
            })
            .chain(unknown)
            .filter_map(|(stream, lag)| Some((lag_label(&self.settings, stream)?, lag)))
            .collect())
    }

    async fn rewind(&mut self, positions: &Positions) -> Result<(), BusError> {
        if !self.subscribed {
            return Ok(());
        }
        let (consumer, settings) = (self.consumer.clone(), self.settings.clone());
        let streams: Vec<u32> = self.acknowledged.iter().copied().collect();
        let positions = positions.clone();
        tokio::task::spawn_blocking(move || {
            for stream in streams {
                let Some((topic, partition)) = kafka_partition(&settings, stream) else { continue };
                let offset = match positions.get(&stream) {
                    Some(&last) => Offset::Offset(last as i64 + 1),
                    None => Offset::Beginning,
                };
                consumer.seek(&topic, partition, offset, Duration::from_secs(5)).map_err(unavailable)?;
            }
            Ok::<_, BusError>(())
        })
        .await
        .map_err(unavailable)??;
        // Held records are of streams not yet taken, so not yet read: they stay.
        Ok(())
    }

    fn owned(&self) -> Option<Vec<u32>> {
        Some(self.acknowledged.iter().copied().collect())
    }

    fn take_rebalance(&mut self) -> Option<Rebalance> {
        let mut events = self.events.lock().ok()?;
        if events.pending == Rebalance::default() {
            return None;
        }
        let change = std::mem::take(&mut events.pending);
        self.acknowledged = events.assigned.clone();
        drop(events);
        // Where the partitions taken now end is asked at the next lag reading, not up to a second later.
        if let Ok(mut slot) = self.lag.lock() {
            slot.refreshed = None;
        }
        Some(change)
    }

    async fn commit(&mut self, positions: &Positions) -> Result<(), BusError> {
        let mut list = TopicPartitionList::new();
        for (stream, last) in positions.iter().filter(|(s, _)| self.acknowledged.contains(s)) {
            let Some((topic, partition)) = kafka_partition(&self.settings, *stream) else { continue };
            list.add_partition_offset(&topic, partition, Offset::Offset(*last as i64 + 1))
                .map_err(unavailable)?;
        }
        if list.count() > 0 {
            // Asynchronous: the stored positions are the truth, a lost commit only means a longer re-read.
            if let Err(err) = self.consumer.commit(&list, CommitMode::Async) {
                tracing::debug!(error = %err, "offset commit not sent");
            }
        }
        Ok(())
    }
}
