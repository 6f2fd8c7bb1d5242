//! Prometheus metrics (`driftline_*`) of the HTTP stages, and the `/metrics` endpoint that exposes every
//! stage's metrics from the process-wide registry.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use prometheus::{
    register_histogram_vec, register_int_counter_vec, Encoder, HistogramVec, IntCounterVec, TextEncoder,
};

pub(crate) static REQUESTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_http_requests_total",
        "HTTP requests by route and status",
        &["method", "route", "status"]
    )
    .expect("metric names are static and valid")
});

pub(crate) static LATENCY: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "driftline_http_request_duration_seconds",
        "HTTP request latency by route",
        &["method", "route"],
        vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]
    )
    .expect("metric names are static and valid")
});

/// Requests the local-mode guard refused, by status (421 host, 403 origin, 415 content type).
pub static GUARD_REFUSALS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_http_guard_refusals_total",
        "Requests refused because a web page on another site could have sent them",
        &["status"]
    )
    .expect("metric names are static and valid")
});

/// Times a connection took the last free permit of `server.max_connections` (the next ones wait).
pub static CONNECTIONS_AT_LIMIT: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "driftline_http_connection_limit_reached_total",
        "Times every permit of server.max_connections was taken (further connections wait in the backlog)"
    )
    .expect("metric names are static and valid")
});

/// Request bodies refused before any handler, by reason (too_large, deadline, below_rate, busy, broken).
pub static BODIES_REFUSED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_http_bodies_refused_total",
        "Request bodies refused while they were read, by reason",
        &["reason"]
    )
    .expect("metric names are static and valid")
});

/// Connections refused at accept, by reason (per_peer: one address holds its share; full: every
/// connection slot, the reserved ones included, is taken).
pub static CONNECTIONS_REFUSED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_http_connections_refused_total",
        "Connections refused at accept, by reason",
        &["reason"]
    )
    .expect("metric names are static and valid")
});

/// `GET /metrics` in the Prometheus text format.
pub async fn metrics() -> Response {
    let mut buffer = Vec::new();
    if let Err(err) = TextEncoder::new().encode(&prometheus::gather(), &mut buffer) {
        tracing::error!(error = %err, "metrics encoding failed");
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], buffer).into_response()
}

pub(crate) static PROCESS_FAILURES: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "driftline_process_failures_total",
        "Fatal failures (a detector worker that stopped): the process reports not ready and exits"
    )
    .expect("metric names are static and valid")
});
