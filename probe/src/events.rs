//! What happens in the probe, one type each: emitting one writes its log line and counts its metric in
//! one place (Vector's internal events). Metrics are counted nowhere else in the crate (the tidy test
//! checks), and their label values are enums.

use crate::metrics;

/// Something that happened; `emit` logs it and counts it.
pub(crate) trait Emit {
    fn emit(self);
}

pub(crate) struct ProbeSucceeded<'a> {
    pub server: &'a dyn std::fmt::Display,
    pub tools: usize,
    pub latency_ms: f64,
}

impl Emit for ProbeSucceeded<'_> {
    fn emit(self) {
        tracing::debug!(server = %self.server, tools = self.tools, latency_ms = self.latency_ms, "probe succeeded");
        metrics::PROBES.with_label_values(&["up"]).inc();
    }
}

pub(crate) struct ProbeFailed<'a> {
    pub server: &'a dyn std::fmt::Display,
    pub endpoint: &'a str,
    pub error: &'a dyn std::fmt::Display,
    pub failures: u32,
}

impl Emit for ProbeFailed<'_> {
    fn emit(self) {
        let ProbeFailed { server, endpoint, error, failures } = self;
        tracing::info!(server = %server, endpoint, error = %error, failures, "probe failed");
        metrics::PROBES.with_label_values(&["down"]).inc();
    }
}

/// A server's stderr lines not logged under the rate limit.
pub(crate) struct StderrSuppressed<'a> {
    pub server: &'a str,
    pub lines: u64,
}

impl Emit for StderrSuppressed<'_> {
    fn emit(self) {
        tracing::warn!(
            server = self.server,
            lines = self.lines,
            "mcp server stderr lines not logged (rate limit)"
        );
        metrics::STDERR_SUPPRESSED.inc_by(self.lines);
    }
}
