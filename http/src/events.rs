//! What happens to requests and connections, one type each: emitting one writes its log line and counts
//! its metric in one place (Vector's internal events). Metrics are counted nowhere else in the crate (the
//! tidy test checks); refusals that can flood log through their kind's budget (`refusals::throttled`).

use std::net::IpAddr;

use axum::http::StatusCode;

use crate::metrics;

/// Something that happened; `emit` logs it and counts it.
pub(crate) trait Emit {
    fn emit(self);
}

/// A request answered: by method (a closed set), matched route and status.
pub(crate) struct RequestServed<'a> {
    pub method: &'static str,
    pub route: &'a str,
    pub status: u16,
    pub seconds: f64,
}

impl Emit for RequestServed<'_> {
    fn emit(self) {
        let RequestServed { method, route, status, seconds } = self;
        metrics::REQUESTS.with_label_values(&[method, route, &status.to_string()]).inc();
        metrics::LATENCY.with_label_values(&[method, route]).observe(seconds);
        if status >= 500 {
            tracing::warn!(%method, %route, status, seconds, "request failed");
        } else {
            tracing::debug!(%method, %route, status, seconds, "request served");
        }
    }
}

pub(crate) struct RequestBodyRefused<'a> {
    pub path: &'a str,
    /// The `reason` label: a closed set of kinds.
    pub kind: &'static str,
    pub reason: &'a dyn std::fmt::Display,
}

impl Emit for RequestBodyRefused<'_> {
    fn emit(self) {
        let RequestBodyRefused { path, kind, reason } = self;
        metrics::BODIES_REFUSED.with_label_values(&[kind]).inc();
        crate::refusals::throttled("body", |unlogged| {
            tracing::warn!(path, reason = %reason, unlogged_before = unlogged, "request body refused");
        });
    }
}

pub(crate) struct GuardRefused<'a> {
    pub status: StatusCode,
    pub reason: &'a str,
}

impl Emit for GuardRefused<'_> {
    fn emit(self) {
        tracing::warn!(status = self.status.as_u16(), reason = %self.reason, "request refused by the local-mode guard");
        metrics::GUARD_REFUSALS.with_label_values(&[self.status.as_str()]).inc();
    }
}

/// A connection taken at the limit: only health, readiness and metrics are served on it.
pub(crate) struct ConnectionLimitReached {
    pub max_connections: usize,
    pub reserved_connections: usize,
}

impl Emit for ConnectionLimitReached {
    fn emit(self) {
        metrics::CONNECTIONS_AT_LIMIT.inc();
        crate::refusals::throttled("connection_limit", |count| {
            tracing::warn!(
                max_connections = self.max_connections,
                reserved_connections = self.reserved_connections,
                unlogged_before = count,
                "connection limit reached; only health, readiness and metrics are served beyond it"
            );
        });
    }
}

/// A connection refused because its address holds its share.
pub(crate) struct ConnectionRefusedPerPeer {
    pub peer: IpAddr,
    pub limit: usize,
}

impl Emit for ConnectionRefusedPerPeer {
    fn emit(self) {
        metrics::CONNECTIONS_REFUSED.with_label_values(&["per_peer"]).inc();
        crate::refusals::throttled("connections_per_peer", |count| {
            tracing::warn!(peer = %self.peer, limit = self.limit, unlogged_before = count, "connection refused: the address holds its share");
        });
    }
}

/// The process failed for good (a detector worker that stopped).
pub(crate) struct ProcessFailed<'a> {
    pub reason: &'a str,
}

impl Emit for ProcessFailed<'_> {
    fn emit(self) {
        metrics::PROCESS_FAILURES.inc();
        tracing::error!(reason = %self.reason, "fatal: not ready, shutting down so that the process is restarted");
    }
}
