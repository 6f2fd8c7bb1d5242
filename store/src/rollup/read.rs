//! What both stores compute the same way from the rollup rows a read selects: an agent's use of a tool
//! over a window, and timeline buckets.

use std::collections::{BTreeMap, HashMap};

use super::{LatencyMerge, SessionSketch, ShapeCounts};
use crate::views::{AgentStats, BucketAggregate};
use crate::StoreError;

/// An agent row as a drift-impact read selects it (ClickHouse reads it by these column names too).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, clickhouse::Row)]
pub(crate) struct AgentRow {
    pub agent: String,
    pub calls: u64,
    pub errors: u64,
    pub duration_sum_ms: f64,
    pub last_call_ms: i64,
    /// An encoded [`SessionSketch`].
    #[serde(with = "serde_bytes")]
    pub sessions: Vec<u8>,
}

/// Per agent (most calls first, then by name): sessions, calls, errors, average latency and last call;
/// and the distinct sessions of all of them together.
pub(crate) fn agent_stats(rows: Vec<AgentRow>) -> Result<(Vec<AgentStats>, u64), StoreError> {
    struct Sum {
        calls: u64,
        errors: u64,
        duration_sum_ms: f64,
        last_call_ms: i64,
        sessions: SessionSketch,
    }
    let mut agents: HashMap<String, Sum> = HashMap::new();
    let mut everyone = SessionSketch::default();
    for row in rows {
        let sessions = SessionSketch::decode(&row.sessions)?;
        everyone.merge(&sessions, SessionSketch::READ_EXACT_LIMIT);
        let sum = agents.entry(row.agent).or_insert_with(|| Sum {
            calls: 0,
            errors: 0,
            duration_sum_ms: 0.0,
            last_call_ms: i64::MIN,
            sessions: SessionSketch::default(),
        });
        sum.calls += row.calls;
        sum.errors += row.errors;
        sum.duration_sum_ms += row.duration_sum_ms;
        sum.last_call_ms = sum.last_call_ms.max(row.last_call_ms);
        sum.sessions.merge(&sessions, SessionSketch::READ_EXACT_LIMIT);
    }
    let mut stats: Vec<AgentStats> = agents
        .into_iter()
        .filter(|(_, sum)| sum.calls > 0)
        .map(|(agent, sum)| {
            let average = sum.duration_sum_ms / sum.calls as f64;
            (agent, sum.sessions.estimate(), sum.calls, sum.errors, average, sum.last_call_ms)
        })
        .collect();
    stats.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    Ok((stats, everyone.estimate()))
}

/// A tool row as a timeline read selects it (ClickHouse reads it by these column names too).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, clickhouse::Row)]
pub(crate) struct BucketRow {
    pub bucket_ms: i64,
    pub calls: u64,
    pub errors: u64,
    /// An encoded [`super::LatencySketch`].
    #[serde(with = "serde_bytes")]
    pub latency: Vec<u8>,
    /// Encoded [`ShapeCounts`].
    #[serde(with = "serde_bytes")]
    pub shapes: Vec<u8>,
}

/// Rows (of one granularity, from `from_ms` on) summed into buckets of `bucket_ms`, keyed by bucket index.
pub(crate) fn bucket_aggregates(
    from_ms: i64,
    bucket_ms: i64,
    rows: Vec<BucketRow>,
) -> Result<BTreeMap<i64, BucketAggregate>, StoreError> {
    struct Sum {
        calls: u64,
        errors: u64,
        latency: LatencyMerge,
        shapes: ShapeCounts,
    }
    let mut buckets: BTreeMap<i64, Sum> = BTreeMap::new();
    for row in rows {
        let index = (row.bucket_ms - from_ms).div_euclid(bucket_ms.max(1));
        let sum = buckets.entry(index).or_insert_with(|| Sum {
            calls: 0,
            errors: 0,
            latency: LatencyMerge::default(),
            shapes: ShapeCounts::default(),
        });
        sum.calls += row.calls;
        sum.errors += row.errors;
        sum.latency.add_encoded(&row.latency)?;
        sum.shapes.merge(&ShapeCounts::decode(&row.shapes)?);
    }
    Ok(buckets
        .into_iter()
        .map(|(index, sum)| {
            let latency = sum.latency.finish();
            let aggregate = BucketAggregate {
                calls: sum.calls,
                errors: sum.errors,
                fingerprinted: sum.shapes.total(),
                dominant: sum.shapes.dominant(),
                p50_ms: latency.percentile(0.5),
                p95_ms: latency.percentile(0.95),
            };
            (index, aggregate)
        })
        .collect())
}

/// A tool's outcome counts (in [`driftline_schemas::ShapeOutcome::ALL`] order) as the (server, tool,
/// status, outcome, count) rows return-value statistics read.
pub(crate) fn outcome_rows(
    server: &str,
    tool: &str,
    outcomes: [u64; 7],
) -> Vec<(String, String, String, String, u64)> {
    use driftline_schemas::ShapeOutcome;
    ShapeOutcome::ALL
        .into_iter()
        .zip(outcomes)
        .filter(|(_, n)| *n > 0)
        .map(|(outcome, n)| {
            let status = if outcome == ShapeOutcome::NotSuccess { "error" } else { "success" };
            (server.to_owned(), tool.to_owned(), status.to_owned(), outcome.as_str().to_owned(), n)
        })
        .collect()
}
