use std::sync::LazyLock;

use prometheus::{register_int_counter_vec, IntCounterVec};

/// Probes by result: `up` (the tool list was read) or `down`.
pub static PROBES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!("driftline_probes_total", "MCP server probes by result", &["result"])
        .expect("metric names are static and valid")
});
