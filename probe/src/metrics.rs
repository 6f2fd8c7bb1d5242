//! The probe's Prometheus metrics (each is counted where its log event is written).

use std::sync::LazyLock;

use prometheus::{register_int_counter, register_int_counter_vec, IntCounter, IntCounterVec};

/// Probes by result: `up` (the tool list was read) or `down`.
pub static PROBES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!("driftline_probes_total", "MCP server probes by result", &["result"])
        .expect("metric names are static and valid")
});

/// stderr lines of stdio servers that the rate limit kept out of the log.
pub static STDERR_SUPPRESSED: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "driftline_probe_stderr_lines_suppressed_total",
        "stderr lines of stdio MCP servers not logged because of the rate limit"
    )
    .expect("metric names are static and valid")
});
