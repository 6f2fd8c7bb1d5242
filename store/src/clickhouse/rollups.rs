//! Rollup rows on ClickHouse: the tool and agent row types, their conversions, and the window reads.

use std::collections::BTreeSet;

use clickhouse::Row;
use driftline_schemas::InputPosition;
use serde::{Deserialize, Serialize};

use crate::rollup::{self, Rollup, RollupKey};
use crate::StoreError;

#[derive(Row, Serialize, Deserialize)]
pub(super) struct ToolRollupRow {
    pub(super) project: String,
    pub(super) server: String,
    pub(super) tool: String,
    pub(super) bucket_seconds: u32,
    pub(super) bucket_ms: i64,
    pub(super) through_partition: u32,
    pub(super) through_offset: u64,
    pub(super) calls: u64,
    pub(super) errors: u64,
    pub(super) duration_sum: f64,
    pub(super) last_call_ms: i64,
    pub(super) fingerprinted: u64,
    pub(super) oversized: u64,
    pub(super) truncated_sentinel: u64,
    pub(super) unparseable: u64,
    pub(super) too_deep: u64,
    pub(super) absent: u64,
    pub(super) not_success: u64,
    #[serde(with = "serde_bytes")]
    pub(super) latency: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub(super) shapes: Vec<u8>,
}

#[derive(Row, Serialize, Deserialize)]
pub(super) struct AgentRollupRow {
    pub(super) project: String,
    pub(super) server: String,
    pub(super) tool: String,
    pub(super) bucket_seconds: u32,
    pub(super) bucket_ms: i64,
    pub(super) agent: String,
    pub(super) through_partition: u32,
    pub(super) through_offset: u64,
    pub(super) calls: u64,
    pub(super) errors: u64,
    pub(super) duration_sum: f64,
    pub(super) last_call_ms: i64,
    #[serde(with = "serde_bytes")]
    pub(super) sessions: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub(super) arguments: Vec<u8>,
}

/// What the rollup rows a detector asks for have in common, to read them in one range.
pub(super) struct RollupScope<'a> {
    pub(super) tools: BTreeSet<(&'a str, &'a str)>,
    pub(super) agents: BTreeSet<&'a str>,
    pub(super) from_ms: i64,
    pub(super) to_ms: i64,
}

impl Default for RollupScope<'_> {
    fn default() -> Self {
        RollupScope { tools: BTreeSet::new(), agents: BTreeSet::new(), from_ms: i64::MAX, to_ms: i64::MIN }
    }
}

/// Splits rollup rows by table.
pub(super) fn rollup_rows(rows: &[Rollup]) -> (Vec<ToolRollupRow>, Vec<AgentRollupRow>) {
    let (mut tools, mut agents) = (Vec::new(), Vec::new());
    for row in rows {
        let Some(through) = row.through else { continue };
        let key = &row.key;
        let bucket_seconds = (key.granularity_ms / 1000) as u32;
        match &key.agent {
            None => {
                let [fingerprinted, oversized, truncated_sentinel, unparseable, too_deep, absent, not_success] =
                    row.outcomes;
                tools.push(ToolRollupRow {
                    project: key.project.clone(),
                    server: key.server.clone(),
                    tool: key.tool.clone(),
                    bucket_seconds,
                    bucket_ms: key.bucket_ms,
                    through_partition: through.partition,
                    through_offset: through.offset,
                    calls: row.calls,
                    errors: row.errors,
                    duration_sum: row.duration_sum_ms,
                    last_call_ms: row.last_call_ms,
                    fingerprinted,
                    oversized,
                    truncated_sentinel,
                    unparseable,
                    too_deep,
                    absent,
                    not_success,
                    latency: row.latency.encode(),
                    shapes: row.shapes.encode(),
                });
            }
            Some(agent) => agents.push(AgentRollupRow {
                project: key.project.clone(),
                server: key.server.clone(),
                tool: key.tool.clone(),
                bucket_seconds,
                bucket_ms: key.bucket_ms,
                agent: agent.clone(),
                through_partition: through.partition,
                through_offset: through.offset,
                calls: row.calls,
                errors: row.errors,
                duration_sum: row.duration_sum_ms,
                last_call_ms: row.last_call_ms,
                sessions: row.sessions.encode(),
                arguments: row.arguments.encode(),
            }),
        }
    }
    (tools, agents)
}

impl ToolRollupRow {
    pub(super) fn into_rollup(self) -> Result<Rollup, StoreError> {
        Ok(Rollup {
            key: RollupKey {
                project: self.project,
                server: self.server,
                tool: self.tool,
                agent: None,
                granularity_ms: i64::from(self.bucket_seconds) * 1000,
                bucket_ms: self.bucket_ms,
            },
            through: Some(InputPosition { partition: self.through_partition, offset: self.through_offset }),
            calls: self.calls,
            errors: self.errors,
            duration_sum_ms: self.duration_sum,
            last_call_ms: self.last_call_ms,
            outcomes: [
                self.fingerprinted,
                self.oversized,
                self.truncated_sentinel,
                self.unparseable,
                self.too_deep,
                self.absent,
                self.not_success,
            ],
            latency: rollup::LatencySketch::decode(&self.latency)?,
            shapes: rollup::ShapeCounts::decode(&self.shapes)?,
            sessions: rollup::SessionSketch::default(),
            arguments: rollup::ArgumentShapes::default(),
        })
    }
}

impl AgentRollupRow {
    pub(super) fn into_rollup(self) -> Result<Rollup, StoreError> {
        Ok(Rollup {
            key: RollupKey {
                project: self.project,
                server: self.server,
                tool: self.tool,
                agent: Some(self.agent),
                granularity_ms: i64::from(self.bucket_seconds) * 1000,
                bucket_ms: self.bucket_ms,
            },
            through: Some(InputPosition { partition: self.through_partition, offset: self.through_offset }),
            calls: self.calls,
            errors: self.errors,
            duration_sum_ms: self.duration_sum,
            last_call_ms: self.last_call_ms,
            sessions: rollup::SessionSketch::decode(&self.sessions)?,
            arguments: rollup::ArgumentShapes::decode(&self.arguments)?,
            ..Default::default()
        })
    }
}

/// The tool rows of a window (minute rows at its start, hour rows after); see [`bind_window`].
pub(super) const TOOL_WINDOW: &str = "FROM tool_rollups FINAL WHERE project = ?
    AND ((bucket_seconds = 3600 AND bucket_ms >= ?) OR (bucket_seconds = 60 AND bucket_ms >= ? AND bucket_ms < ?))";

/// Binds a project and the window's bounds to a query of [`TOOL_WINDOW`]'s rows.
pub(super) fn bind_window(
    query: clickhouse::query::Query,
    project: &str,
    window: rollup::Window,
) -> clickhouse::query::Query {
    query.bind(project).bind(window.hours_from_ms).bind(window.from_ms).bind(window.hours_from_ms)
}
