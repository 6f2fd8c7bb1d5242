//! Prometheus metrics (`driftline_*`) of the HTTP stages, and the `/metrics` endpoint that exposes every
//! stage's metrics from the process-wide registry.

use std::sync::LazyLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus::{
    register_histogram_vec, register_int_counter_vec, Encoder, HistogramVec, IntCounterVec, TextEncoder,
};

static REQUESTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "driftline_http_requests_total",
        "HTTP requests by route and status",
        &["method", "route", "status"]
    )
    .expect("metric names are static and valid")
});

static LATENCY: LazyLock<HistogramVec> = LazyLock::new(|| {
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

/// Middleware: counts and times every request, and logs it, under its route template (not the raw path,
/// which would make a label per server name).
pub async fn track(request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str()).to_owned();
    // Labels from a closed set: a client's made-up method must not become a new series for ever.
    let method = match *request.method() {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "other",
    };
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let seconds = started.elapsed().as_secs_f64();
    REQUESTS.with_label_values(&[method, route.as_str(), &status.to_string()]).inc();
    LATENCY.with_label_values(&[method, route.as_str()]).observe(seconds);
    if status >= 500 {
        tracing::warn!(%method, %route, status, seconds, "request failed");
    } else {
        tracing::debug!(%method, %route, status, seconds, "request served");
    }
    response
}

/// `GET /metrics` in the Prometheus text format.
pub async fn metrics() -> Response {
    let mut buffer = Vec::new();
    if let Err(err) = TextEncoder::new().encode(&prometheus::gather(), &mut buffer) {
        tracing::error!(error = %err, "metrics encoding failed");
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], buffer).into_response()
}
