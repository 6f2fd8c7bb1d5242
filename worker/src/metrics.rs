//! The detector worker's Prometheus metrics (each is counted where its log event is written).

use std::sync::LazyLock;

use prometheus::{
    register_gauge, register_histogram, register_int_counter, register_int_counter_vec, register_int_gauge,
    register_int_gauge_vec, Gauge, Histogram, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
};

pub static RECORDS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_worker_records_total",
        "Records consumed by the detector worker",
        &["topic"]
    )
    .expect("metric names are static and valid")
});

/// Buckets up to [`crate::MAX_BATCH_RECORDS_BOUND`]: on a backlog batches hold 20,000 records by default,
/// which buckets ending at 500 counted only as `+Inf` (a dashboard's p50 then read 500).
const BATCH_SIZE_BUCKETS: [f64; 11] =
    [1.0, 10.0, 100.0, 500.0, 1_000.0, 2_500.0, 5_000.0, 10_000.0, 20_000.0, 50_000.0, 100_000.0];

pub static BATCH_SIZE: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "driftline_worker_batch_records",
        "Records per stored batch",
        BATCH_SIZE_BUCKETS.to_vec()
    )
    .expect("metric names are static and valid")
});

pub static FLUSH_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "driftline_worker_flush_seconds",
        "Time to store one batch (outputs, state, offset)",
        // Measured: 15 full batches (20,000 records) on SQLite, mean 0.18 s, three over 0.25 s; a slow or
        // retrying store takes seconds, which buckets ending at 1 s hid.
        vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]
    )
    .expect("metric names are static and valid")
});

/// By `reason`: the kind of refusal (`crate::refusal::RefusalKind`), a bounded set.
pub static DEAD_LETTERS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    let counter = register_int_counter_vec!(
        "driftline_worker_dead_letters_total",
        "Records skipped because they could not be used, by kind of refusal",
        &["reason"]
    )
    .expect("metric names are static and valid");
    for kind in crate::refusal::RefusalKind::ALL {
        counter.with_label_values(&[kind.as_str()]);
    }
    counter
});

pub static RELEASED_RECORDS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "driftline_worker_released_records_total",
        "Bus records dropped after their outputs were made durable (the embedded log; Kafka keeps its retention)"
    )
    .expect("metric names are static and valid")
});

pub static RELEASE_FAILURES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "driftline_worker_release_failures_total",
        "Times the store could not be synced or the bus could not drop released records (tried again later)"
    )
    .expect("metric names are static and valid")
});

pub static EXPIRED_ROWS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "driftline_store_expired_rows_total",
        "Stored rows removed past their retention (ClickHouse expires rows by age itself: there, snapshots beyond a server's newest)"
    )
    .expect("metric names are static and valid")
});

pub static EXPIRY_FAILURES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "driftline_store_expiry_failures_total",
        "Expiry runs that failed (tried again at the next run)"
    )
    .expect("metric names are static and valid")
});

pub static REBALANCES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "driftline_worker_rebalances_total",
        "Consumer-group partition changes this detector followed"
    )
    .expect("metric names are static and valid")
});

pub static OWNED_PARTITIONS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "driftline_worker_owned_partitions",
        "Input partitions this detector owns (consumer group)"
    )
    .expect("metric names are static and valid")
});

pub static RETRIES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!("driftline_worker_retries_total", "Batches retried after a bus or store failure")
        .expect("metric names are static and valid")
});

pub static DRIFT_EVENTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_drift_events_total",
        "Tool-list drift events by worst classification",
        &["classification"]
    )
    .expect("metric names are static and valid")
});

pub static HIGH_SEVERITY_EVENTS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "driftline_drift_events_high_severity_total",
        "Drift events carrying a high-severity security flag"
    )
    .expect("metric names are static and valid")
});

pub static SHAPE_SIGNALS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_shape_signals_total",
        "Return-shape drift signals by ranking",
        &["ranking"]
    )
    .expect("metric names are static and valid")
});

pub static PARTITION_LAG: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "driftline_worker_partition_lag",
        "Records not yet processed, per input partition this detector owns",
        &["partition"]
    )
    .expect("metric names are static and valid")
});

pub static LAG: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!("driftline_worker_consumer_lag", "Records on the bus not yet processed")
        .expect("metric names are static and valid")
});

/// How long the oldest record not yet processed has been on the bus: what a freshness SLO watches. Set
/// when records are read (their oldest) and 0 when nothing is left.
pub static OLDEST_UNPROCESSED: LazyLock<Gauge> = LazyLock::new(|| {
    register_gauge!(
        "driftline_worker_oldest_unprocessed_seconds",
        "Age of the oldest record on the bus the detector has not processed yet"
    )
    .expect("metric names are static and valid")
});

/// Records a batch left for the next once its time was spent (tool-list streams, `fair.rs`).
pub static CARRIED_RECORDS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "driftline_worker_carried_records_total",
        "Records of tool-list streams a batch left for the next once detector.max_batch_millis was spent"
    )
    .expect("metric names are static and valid")
});

/// Call identities the worker remembers (where the store is not asked per batch).
pub static REPEAT_IDENTITIES: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "driftline_worker_repeat_identities",
        "Identities of recent calls held to tell a call sent again (detector.repeat_memory_bytes bounds them)"
    )
    .expect("metric names are static and valid")
});

/// Identities let go before their window ended: a retry of one of them is counted again.
pub static REPEAT_EVICTED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "driftline_worker_repeat_identities_evicted_total",
        "Call identities that left memory before the repeat window ended (a retry of one is counted again)"
    )
    .expect("metric names are static and valid")
});

/// How far back a call sent again is still told: the age of the oldest identity held (at most the window).
pub static REPEAT_HORIZON: LazyLock<Gauge> = LazyLock::new(|| {
    register_gauge!(
        "driftline_worker_repeat_horizon_seconds",
        "Age of the oldest call identity held: retries of calls older than this are counted again"
    )
    .expect("metric names are static and valid")
});

/// Tools forgotten for going unseen longer than `detector.forget_unseen_tools_after_seconds`.
pub static FORGOTTEN_TOOLS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "driftline_worker_forgotten_tools_total",
        "Tools whose detector state was released after going unseen too long"
    )
    .expect("metric names are static and valid")
});

/// Keys whose stored state could not be read: their records go to dead letters until it is repaired.
pub static QUARANTINED_KEYS: LazyLock<IntGauge> = LazyLock::new(|| {
    register_int_gauge!(
        "driftline_worker_quarantined_keys",
        "Keys whose stored detector state cannot be read (their records are dead-lettered)"
    )
    .expect("metric names are static and valid")
});

pub static STATE_KEYS: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "driftline_detector_state_keys",
        "Keys with detector state held in memory",
        &["kind"]
    )
    .expect("metric names are static and valid")
});

pub static REPEATED_CALLS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "driftline_worker_repeated_calls_total",
        "Tool calls sent again (same project, server, tool, trace and span id) and counted once"
    )
    .expect("metric names are static and valid")
});

pub static DECLARATIONS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "driftline_worker_output_declarations_total",
        "Declared output schemas published to their tools' partitions after a baseline changed"
    )
    .expect("metric names are static and valid")
});

pub static MISMATCH_SIGNALS: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "driftline_declared_output_mismatch_signals_total",
        "Signals that a tool's returns stopped meeting its declared output schema"
    )
    .expect("metric names are static and valid")
});

pub static ROLLUP_ROWS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_worker_rollup_rows_total",
        "Rollup rows the detector wrote (written), read from the store before folding calls into them (loaded), and rebuilt from calls stored before rollups existed (backfilled)",
        &["source"]
    )
    .expect("metric names are static and valid")
});

#[cfg(test)]
mod tests {
    use super::*;

    /// Every batch size a configuration allows falls in a finite bucket, and the default batch exactly on one.
    #[test]
    fn batch_size_buckets_reach_the_largest_batch() {
        assert_eq!(BATCH_SIZE_BUCKETS.last().copied(), Some(crate::MAX_BATCH_RECORDS_BOUND as f64));
        let default = crate::WorkerSettings::default().max_batch_records as f64;
        assert!(BATCH_SIZE_BUCKETS.contains(&default), "no bucket at the default batch size {default}");
        assert!(BATCH_SIZE_BUCKETS.windows(2).all(|pair| pair[0] < pair[1]), "buckets must increase");
    }
}
