//! The watcher's Prometheus metrics (each is counted where its log event is written, in `events.rs`).

use std::sync::LazyLock;

use prometheus::{
    register_gauge, register_histogram, register_int_counter_vec, Gauge, Histogram, IntCounterVec,
};

/// Registry checks by registry and outcome.
pub static CHECKS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_upstream_checks_total",
        "Registry checks of watched packages by registry and outcome",
        &["registry", "outcome"]
    )
    .expect("metric names are static and valid")
});

/// New releases seen, by registry.
pub static VERSIONS_SEEN: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_upstream_versions_seen_total",
        "New releases of watched packages seen on their registries",
        &["registry"]
    )
    .expect("metric names are static and valid")
});

/// Sandboxed captures by outcome.
pub static CAPTURES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_upstream_captures_total",
        "Releases installed and captured in the sandbox, by outcome",
        &["outcome"]
    )
    .expect("metric names are static and valid")
});

/// Seconds an install and capture took.
pub static CAPTURE_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "driftline_upstream_capture_seconds",
        "Seconds to install a release and capture its lists in the sandbox",
        vec![0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0]
    )
    .expect("metric names are static and valid")
});

/// When the watcher last finished a check (any outcome): an alert fires when it stops moving.
pub static LAST_CHECK: LazyLock<Gauge> = LazyLock::new(|| {
    register_gauge!(
        "driftline_upstream_last_check_timestamp_seconds",
        "Unix time of the upstream watcher's last registry check"
    )
    .expect("metric names are static and valid")
});

/// 1 when the watcher can run packages' code (a sandbox was made), else 0.
pub static SANDBOX_AVAILABLE: LazyLock<Gauge> = LazyLock::new(|| {
    register_gauge!(
        "driftline_upstream_sandbox_available",
        "1 when the upstream watcher has a sandbox to run releases in, 0 when it refuses to run them"
    )
    .expect("metric names are static and valid")
});
