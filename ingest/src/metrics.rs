//! Ingest's Prometheus metrics (each is counted where its log event is written).

use std::sync::LazyLock;

use prometheus::{register_int_counter_vec, IntCounterVec};

/// Spans by result: `accepted`, `rejected` (a bad batch), `unavailable` (the bus refused).
pub static SPANS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_ingest_spans_total",
        "Spans received by ingest, by result",
        &["result"]
    )
    .expect("metric names are static and valid")
});

/// Shape outcomes computed at the edge, and `input_required` for MCP 2026-07-28 interim results (no
/// shape: not the tool's answer).
pub static SHAPE_OUTCOMES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_ingest_shape_outcomes_total",
        "Return values by shape outcome",
        &["outcome"]
    )
    .expect("metric names are static and valid")
});

pub static TOOL_LISTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_ingest_tool_lists_total",
        "Tool lists received by ingest, by result",
        &["result"]
    )
    .expect("metric names are static and valid")
});

/// OTLP spans: `tool_call` (accepted), `skipped` (not a tool call), `rejected`, `unavailable`.
pub static OTLP_SPANS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_ingest_otlp_spans_total",
        "OTLP spans received, by result",
        &["result"]
    )
    .expect("metric names are static and valid")
});

pub static OTLP_SKIPPED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_ingest_otlp_spans_skipped_total",
        "OTLP spans skipped as not tool calls, by reason (other_mcp_method, other_gen_ai_operation, not_gen_ai)",
        &["reason"]
    )
    .expect("metric names are static and valid")
});
