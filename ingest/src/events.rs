//! What happens in ingest, one type each: emitting one writes its log line and counts its metric in one
//! place (Vector's internal events). Metrics are counted nowhere else in the crate (the tidy test checks),
//! and their label values are enums.

use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use driftline_schemas::{LogBudget, ProjectName};

use crate::metrics;
use crate::otlp::SkippedSpans;

/// Something that happened; `emit` logs it and counts it.
pub(crate) trait Emit {
    fn emit(self);
}

/// What became of a batch of spans or a tool list: the `result` label of the ingest counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Durable on the bus.
    Accepted,
    /// Refused for what it holds.
    Rejected,
    /// Refused for its project's budget (tool lists).
    OverBudget,
    /// The bus did not take it; the client may send it again.
    Unavailable,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Rejected => "rejected",
            Outcome::OverBudget => "over_budget",
            Outcome::Unavailable => "unavailable",
        }
    }
}

/// A batch of spans on `/v1/spans`: `spans` is its size when accepted, 1 when refused.
pub(crate) struct SpanBatchReceived<'a> {
    pub project: &'a ProjectName,
    pub outcome: Outcome,
    pub spans: u64,
}

impl Emit for SpanBatchReceived<'_> {
    fn emit(self) {
        let SpanBatchReceived { project, outcome, spans } = self;
        if outcome == Outcome::Accepted {
            tracing::trace!(project = %project, spans, "span batch accepted");
        } else {
            tracing::info!(project = %project, result = outcome.as_str(), "span batch refused");
        }
        metrics::SPANS.with_label_values(&[outcome.as_str()]).inc_by(spans);
    }
}

/// The shape a span's return value was recorded with (`input_required`: an MCP 2026-07-28 interim result,
/// recorded without a shape).
pub(crate) struct ShapeRecorded<'a> {
    pub outcome: driftline_schemas::ShapeOutcome,
    pub interim: bool,
    pub span: &'a driftline_schemas::ToolCallSpan,
}

impl Emit for ShapeRecorded<'_> {
    fn emit(self) {
        let ShapeRecorded { outcome, interim, span } = self;
        let label = if interim {
            tracing::debug!(server = %span.server, tool = %span.tool, span_id = %span.span_id, "interim result: not the tool's answer");
            "input_required"
        } else {
            outcome.as_str()
        };
        metrics::SHAPE_OUTCOMES.with_label_values(&[label]).inc();
    }
}

/// A tool list on `PUT /api/servers/{name}/tools`.
pub(crate) struct ToolListReceived<'a> {
    pub project: &'a ProjectName,
    pub server: &'a str,
    pub outcome: Outcome,
    /// Its tools (accepted) or why it was refused.
    pub detail: &'a dyn std::fmt::Display,
}

impl Emit for ToolListReceived<'_> {
    fn emit(self) {
        let ToolListReceived { project, server, outcome, detail } = self;
        match outcome {
            Outcome::Accepted => {
                tracing::debug!(project = %project, server, tools = %detail, "tool list accepted")
            }
            Outcome::OverBudget => {
                tracing::info!(project = %project, server, work = %detail, "tool list over its project's budget")
            }
            Outcome::Rejected | Outcome::Unavailable => {
                tracing::info!(project = %project, server, result = outcome.as_str(), reason = %detail, "tool list refused")
            }
        }
        metrics::TOOL_LISTS.with_label_values(&[outcome.as_str()]).inc();
    }
}

/// An OTLP trace export: how many of its spans were tool calls put on the bus, skipped as not tool calls,
/// or rejected; `unavailable` when the bus did not take the tool calls.
pub(crate) struct TracesReceived<'a> {
    pub project: &'a ProjectName,
    pub tool_calls: u64,
    pub skipped: &'a SkippedSpans,
    pub rejected: u64,
    pub unavailable: bool,
}

/// Lines about skipped spans: a sample (a second's worth at most), each naming a span of its reason.
static SKIPPED_LINES: LazyLock<Mutex<LogBudget>> = LazyLock::new(|| Mutex::new(LogBudget::default()));

impl Emit for TracesReceived<'_> {
    fn emit(self) {
        let TracesReceived { project, tool_calls, skipped, rejected, unavailable } = self;
        if unavailable {
            tracing::info!(project = %project, tool_calls, "otlp traces refused: the bus is unavailable");
            metrics::OTLP_SPANS.with_label_values(&["unavailable"]).inc_by(tool_calls);
            return;
        }
        tracing::debug!(project = %project, tool_calls, skipped = skipped.total(), rejected, "otlp traces ingested");
        metrics::OTLP_SPANS.with_label_values(&["tool_call"]).inc_by(tool_calls);
        metrics::OTLP_SPANS.with_label_values(&["skipped"]).inc_by(skipped.total());
        metrics::OTLP_SPANS.with_label_values(&["rejected"]).inc_by(rejected);
        for (reason, (count, example)) in &skipped.0 {
            metrics::OTLP_SKIPPED.with_label_values(&[reason.as_str()]).inc_by(*count);
            let line = SKIPPED_LINES.lock().ok().and_then(|mut budget| budget.take(Instant::now()));
            if let Some(unlogged) = line {
                tracing::info!(project = %project, reason = reason.as_str(), count, example = %example, unlogged, "otlp spans skipped: not tool calls");
            }
        }
    }
}
