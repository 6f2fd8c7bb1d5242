//! The notifier's Prometheus metrics (each is counted where its log event is written).

use std::sync::LazyLock;

use prometheus::{register_int_counter_vec, register_int_gauge_vec, IntCounterVec, IntGaugeVec};

/// Notification deliveries by result: `sent`, `retried` (an attempt failed, another follows), `failed`
/// (gave up after the last attempt), `dropped` (the queue was full; the oldest went).
pub static NOTIFICATIONS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_notifications_total",
        "webhook notifications by result",
        &["webhook", "result"]
    )
    .expect("metric names are static and valid")
});

/// Notifications waiting for a webhook.
pub static QUEUE_DEPTH: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!("driftline_notify_queue_depth", "notifications waiting per webhook", &["webhook"])
        .expect("metric names are static and valid")
});
