//! The Kafka bus (DESIGN.md §8): an idempotent producer (acks=all) that returns only after every record's
//! delivery report, and a consumer that reads every partition of the three topics from the positions the
//! worker stored with its outputs (manual assignment, no offset commits: the store holds the positions).
//!
//! Partitions of the three topics are numbered into one space, `InputPosition::partition` = topic index
//! × 65536 + Kafka partition, so one position map covers them all.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use driftline_schemas::{InputPosition, Timestamp};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::Message as _;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::{BusError, Consumer, Delivered, Message, Positions, Producer, Topic};

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
}

impl KafkaSettings {
    pub fn topic_name(&self, topic: Topic) -> String {
        format!("{}{}", self.topic_prefix, topic.as_str())
    }
}

fn stream(topic: Topic, partition: i32) -> u32 {
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
        let producer = ClientConfig::new()
            .set("bootstrap.servers", &settings.brokers)
            .set("enable.idempotence", "true")
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
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.settings.brokers)
            .create()
            .map_err(unavailable)?;
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

    /// A consumer of every partition of the three topics.
    pub fn consumer(&self) -> Result<KafkaConsumer, BusError> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.settings.brokers)
            .set("group.id", format!("{}detectors", self.settings.topic_prefix))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .create()
            .map_err(unavailable)?;
        Ok(KafkaConsumer {
            consumer: Arc::new(consumer),
            settings: self.settings.clone(),
            assigned: false,
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

/// librdkafka's consumer is polled on a blocking thread: its async stream can miss a wake-up when a poll
/// times out, which delays records until the next one arrives.
pub struct KafkaConsumer {
    consumer: Arc<BaseConsumer>,
    settings: KafkaSettings,
    assigned: bool,
    lag: Arc<std::sync::Mutex<LagCache>>,
}

/// Each partition's high watermark at the last refresh.
#[derive(Default)]
struct LagCache {
    refreshed: Option<std::time::Instant>,
    refreshing: bool,
    marks: Vec<(u32, i64)>,
}

const LAG_REFRESH: Duration = Duration::from_secs(5);

fn topic_of(settings: &KafkaSettings, name: &str) -> Option<Topic> {
    TOPICS.into_iter().find(|t| settings.topic_name(*t) == name)
}

fn delivered(
    settings: &KafkaSettings,
    message: &rdkafka::message::BorrowedMessage<'_>,
) -> Result<Delivered, BusError> {
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

impl KafkaConsumer {
    /// Assigns every partition of the three topics, each from the stored position after it. Metadata
    /// requests block, so they run off the async threads.
    async fn assign(&mut self, positions: &Positions) -> Result<(), BusError> {
        let (consumer, settings, positions) =
            (self.consumer.clone(), self.settings.clone(), positions.clone());
        tokio::task::spawn_blocking(move || {
            let mut list = TopicPartitionList::new();
            for topic in TOPICS {
                let name = settings.topic_name(topic);
                // A topic created a moment ago may take a little while to show in the metadata.
                let mut partitions = 0;
                for attempt in 0..40 {
                    let metadata =
                        consumer.fetch_metadata(Some(&name), Duration::from_secs(5)).map_err(unavailable)?;
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
                for partition in 0..partitions as i32 {
                    let offset = match positions.get(&stream(topic, partition)) {
                        Some(&last) => Offset::Offset(last as i64 + 1),
                        None => Offset::Beginning,
                    };
                    list.add_partition_offset(&name, partition, offset).map_err(unavailable)?;
                }
            }
            consumer.assign(&list).map_err(unavailable)
        })
        .await
        .map_err(unavailable)??;
        self.assigned = true;
        Ok(())
    }
}

#[async_trait]
impl Consumer for KafkaConsumer {
    async fn poll(
        &mut self,
        positions: &Positions,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivered>, BusError> {
        if !self.assigned {
            self.assign(positions).await?;
        }
        let consumer = self.consumer.clone();
        let settings = self.settings.clone();
        tokio::task::spawn_blocking(move || {
            let mut records = Vec::new();
            let mut limit = wait;
            while records.len() < max {
                match consumer.poll(limit) {
                    Some(Ok(message)) => records.push(delivered(&settings, &message)?),
                    // Consumer errors report the connection (a broker down, a transport failure): librdkafka
                    // reconnects by itself, so they mean "nothing to read now", not a failed batch.
                    Some(Err(err)) => {
                        tracing::warn!(error = %err, "kafka consumer reports an error; retrying");
                        break;
                    }
                    None => break,
                }
                // After the first record, take only what is already fetched.
                limit = Duration::ZERO;
            }
            Ok(records)
        })
        .await
        .map_err(unavailable)?
    }

    async fn lag(&self, positions: &Positions) -> Result<u64, BusError> {
        // Watermarks cost a broker round trip per partition: a background task refreshes them every few
        // seconds while this answers at once from the last refresh.
        let mut slot = self.lag.lock().map_err(|_| BusError::Unavailable("lag lock poisoned".into()))?;
        let stale = slot.refreshed.is_none_or(|at| at.elapsed() >= LAG_REFRESH);
        if stale && !slot.refreshing {
            slot.refreshing = true;
            let (consumer, settings, shared) =
                (self.consumer.clone(), self.settings.clone(), self.lag.clone());
            tokio::task::spawn_blocking(move || {
                let mut marks = Vec::new();
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
                    *slot = LagCache { refreshed: Some(std::time::Instant::now()), refreshing: false, marks };
                }
            });
        }
        Ok(slot
            .marks
            .iter()
            .map(|(stream, high)| {
                let next = positions.get(stream).map_or(0, |&last| last as i64 + 1);
                (high - next).max(0) as u64
            })
            .sum())
    }

    async fn rewind(&mut self, positions: &Positions) -> Result<(), BusError> {
        self.assigned = false;
        self.assign(positions).await
    }
}
