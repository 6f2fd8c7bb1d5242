//! What both stores compute the same way from the rollup rows a read selects: an agent's use of a tool
//! over a window, and timeline buckets.

use std::collections::{BTreeMap, HashMap};

use super::{ArgumentShapes, LatencyMerge, SessionSketch, ShapeCounts};
use crate::StoreError;

/// One agent's use of a tool over a window, summed from its rollup rows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AgentStats {
    pub agent: String,
    /// Distinct sessions (estimated beyond the exact limit).
    pub sessions: u64,
    pub calls: u64,
    pub errors: u64,
    pub avg_latency_ms: f64,
    pub last_call_ms: i64,
    /// The shapes of the arguments its calls sent, where their spans recorded them.
    pub arguments: ArgumentShapes,
}

/// What a store aggregates for one timeline bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct BucketAggregate {
    pub calls: u64,
    pub errors: u64,
    /// Calls with a conclusive shape, and how many of them had the bucket's most frequent one.
    pub fingerprinted: u64,
    pub dominant: u64,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
}

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
    /// Encoded [`ArgumentShapes`].
    #[serde(with = "serde_bytes")]
    pub arguments: Vec<u8>,
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
        arguments: ArgumentShapes,
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
            arguments: ArgumentShapes::default(),
        });
        sum.calls += row.calls;
        sum.errors += row.errors;
        sum.duration_sum_ms += row.duration_sum_ms;
        sum.last_call_ms = sum.last_call_ms.max(row.last_call_ms);
        sum.sessions.merge(&sessions, SessionSketch::READ_EXACT_LIMIT);
        sum.arguments.merge(&ArgumentShapes::decode(&row.arguments)?);
    }
    let mut stats: Vec<AgentStats> = agents
        .into_iter()
        .filter(|(_, sum)| sum.calls > 0)
        .map(|(agent, sum)| AgentStats {
            avg_latency_ms: sum.duration_sum_ms / sum.calls as f64,
            sessions: sum.sessions.estimate(),
            calls: sum.calls,
            errors: sum.errors,
            last_call_ms: sum.last_call_ms,
            arguments: sum.arguments,
            agent,
        })
        .collect();
    stats.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.agent.cmp(&b.agent)));
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
