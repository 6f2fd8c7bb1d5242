//! What both stores compute the same way from the rows they read: API views and value conversions.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use driftline_schemas::api::{
    ArgumentCheck, ContractState, DriftImpact, OpenDriftCounts, OutcomeCounts, ReturnValueStats, Risk,
    SignalGroup, ToolConsumer, ToolOutcomeStats, ToolShape, ToolSummary, NO_RECENT_CALLERS,
};
use driftline_schemas::{
    Classification, SchemaChange, SchemaDriftEvent, ShapeDriftSignal, ShapeOutcome, SignalKind, Timestamp,
};
use serde_json::Value;

use crate::rollup::{AgentStats, BucketAggregate};
use crate::{ImpactQuery, StoreError};

pub(crate) fn ms(at: Timestamp) -> i64 {
    at.as_millis()
}

pub(crate) fn timestamp(millis: i64) -> Result<Timestamp, StoreError> {
    Timestamp::from_millis(millis)
        .ok_or_else(|| StoreError::Corrupt(format!("timestamp {millis} out of range")))
}

pub(crate) fn text<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    Ok(serde_json::to_string(value)?)
}

/// The lowercase or uppercase wire name of a serde enum value.
pub(crate) fn name<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    match serde_json::to_value(value)? {
        Value::String(name) => Ok(name),
        other => Err(StoreError::Corrupt(format!("expected a name, got {other}"))),
    }
}

pub(crate) fn parse_name<T: serde::de::DeserializeOwned>(name: &str) -> Result<T, StoreError> {
    Ok(serde_json::from_value(Value::String(name.to_owned()))?)
}

/// Servers seen only in traces (calls, no tool list yet) join the list as UNKNOWN, so a server that
/// agents call is never missing from health.
pub(crate) fn with_trace_only_servers(
    mut servers: Vec<driftline_schemas::api::ServerHealth>,
    traced: Vec<String>,
) -> Vec<driftline_schemas::api::ServerHealth> {
    let known: BTreeSet<String> = servers.iter().map(|s| s.server_name.clone()).collect();
    for server_name in traced.into_iter().collect::<BTreeSet<_>>() {
        if !known.contains(&server_name) {
            servers.push(driftline_schemas::api::ServerHealth {
                server_name,
                status: driftline_schemas::ServerStatus::Unknown,
                schema_hash: None,
                tool_count: 0,
                last_seen: None,
                latency_ms: None,
                open_drift: OpenDriftCounts::default(),
                open_changes: OpenDriftCounts::default(),
                max_severity: None,
                note: Some(TRACE_ONLY_NOTE.to_owned()),
                contract_mismatches: Vec::new(),
                context_cost: None,
            });
        }
    }
    servers.sort_by(|a, b| a.server_name.cmp(&b.server_name));
    servers
}

/// A server's row as both stores read it.
pub(crate) struct StoredServer {
    pub server_name: String,
    pub status: String,
    pub schema_hash: Option<String>,
    pub tool_count: u32,
    pub last_seen: Option<i64>,
    pub note: Option<String>,
    pub latency_ms: Option<f64>,
    pub context_tokens: Option<u64>,
    pub context_bytes: Option<u64>,
}

/// A server's health: its row and its open drift ([`open_counts`]).
pub(crate) fn server_health(
    row: StoredServer,
    open: &HashMap<String, OpenDrift>,
) -> Result<driftline_schemas::api::ServerHealth, StoreError> {
    let open = open.get(&row.server_name).cloned().unwrap_or_default();
    Ok(driftline_schemas::api::ServerHealth {
        status: parse_name::<driftline_schemas::ServerStatus>(&row.status)?,
        schema_hash: row.schema_hash,
        tool_count: row.tool_count,
        last_seen: row.last_seen.map(timestamp).transpose()?,
        latency_ms: row.latency_ms,
        open_drift: open.events,
        open_changes: open.changes,
        max_severity: open.max_severity.as_deref().map(parse_name).transpose()?,
        note: row.note,
        server_name: row.server_name,
        contract_mismatches: Vec::new(),
        context_cost: row
            .context_tokens
            .zip(row.context_bytes)
            .map(|(tokens, bytes)| driftline_schemas::ContextCost { tokens, bytes }),
    })
}

/// A current tool's row as both stores read it.
pub(crate) struct StoredToolSchema {
    pub server_name: String,
    pub tool_name: String,
    pub description: Option<String>,
    /// JSON.
    pub input_schema: String,
    pub captured_at: i64,
}

pub(crate) fn tool_schema(row: StoredToolSchema) -> Result<driftline_schemas::api::ToolSchema, StoreError> {
    Ok(driftline_schemas::api::ToolSchema {
        server_name: row.server_name,
        tool_name: row.tool_name,
        description: row.description,
        input_schema: serde_json::from_str(&row.input_schema)?,
        captured_at: timestamp(row.captured_at)?,
    })
}

pub const TRACE_ONLY_NOTE: &str = "seen in traces only: no tool list yet";

/// A server's open drift: events by worst classification, the changes inside them, the worst flag.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct OpenDrift {
    pub events: OpenDriftCounts,
    pub changes: OpenDriftCounts,
    pub max_severity: Option<String>,
}

fn add(counts: &mut OpenDriftCounts, classification: Option<&str>, n: u32) {
    match classification {
        Some("BREAKING") => counts.breaking += n,
        Some("WARNING") => counts.warning += n,
        Some("COMPATIBLE") => counts.compatible += n,
        _ => {}
    }
}

/// Open drift per server from (server, max classification, max severity) of every open event and
/// (server, classification, count) of the changes inside them.
pub(crate) fn open_counts(
    events: impl IntoIterator<Item = (String, Option<String>, Option<String>)>,
    changes: impl IntoIterator<Item = (String, Option<String>, u32)>,
) -> HashMap<String, OpenDrift> {
    let mut open: HashMap<String, OpenDrift> = HashMap::new();
    let rank = |s: &Option<String>| match s.as_deref() {
        Some("high") => 3,
        Some("medium") => 2,
        Some("low") => 1,
        _ => 0,
    };
    for (server, classification, severity) in events {
        let entry = open.entry(server).or_default();
        add(&mut entry.events, classification.as_deref(), 1);
        if rank(&severity) > rank(&entry.max_severity) {
            entry.max_severity = severity;
        }
    }
    for (server, classification, count) in changes {
        add(&mut open.entry(server).or_default().changes, classification.as_deref(), count);
    }
    open
}

/// Signals (as stored JSON, in detection order) grouped by tool and shape, newest group first.
pub(crate) fn signal_groups(
    signals: impl IntoIterator<Item = String>,
) -> Result<Vec<SignalGroup>, StoreError> {
    let mut groups: BTreeMap<(String, String, SignalKind, String), SignalGroup> = BTreeMap::new();
    for json in signals {
        let signal: ShapeDriftSignal = serde_json::from_str(&json)?;
        // A mismatch with the declaration and a drift from the observed baseline are different news,
        // even for the same new shape.
        let key = (signal.server.clone(), signal.tool.clone(), signal.kind, signal.shape_hash.clone());
        match groups.get_mut(&key) {
            Some(group) => {
                group.first_seen = group.first_seen.min(signal.detected_at);
                group.last_seen = group.last_seen.max(signal.detected_at);
                group.occurrences += 1;
            }
            None => {
                groups.insert(
                    key,
                    SignalGroup {
                        kind: signal.kind,
                        fingerprint: signal.fingerprint,
                        server: signal.server,
                        tool: signal.tool,
                        shape: signal.shape,
                        shape_hash: signal.shape_hash,
                        baseline_shape: signal.baseline_shape,
                        baseline_hash: signal.baseline_hash,
                        ranking: signal.ranking,
                        reasons: signal.reasons,
                        first_seen: signal.detected_at,
                        last_seen: signal.detected_at,
                        occurrences: 1,
                        sample_span_id: signal.span_id,
                    },
                );
            }
        }
    }
    let mut groups: Vec<SignalGroup> = groups.into_values().collect();
    groups.sort_by(|a, b| b.last_seen.cmp(&a.last_seen).then_with(|| a.fingerprint.cmp(&b.fingerprint)));
    Ok(groups)
}

/// (status, shape outcome, count) of calls.
type OutcomeRow = (String, String, u64);

/// Outcome counts from (status, shape outcome, count) rows.
pub(crate) fn outcome_counts(rows: &[OutcomeRow]) -> OutcomeCounts {
    let mut counts = OutcomeCounts::default();
    for (_, outcome, n) in rows {
        let outcome = ShapeOutcome::ALL
            .iter()
            .copied()
            .find(|o| o.as_str() == outcome)
            .unwrap_or(ShapeOutcome::NotSuccess);
        counts.add(outcome, *n);
    }
    counts
}

pub(crate) fn rate(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Per-tool call statistics in a window: (server, tool, calls, errors, average latency, last call ms).
pub(crate) type CallStats = (String, String, u64, u64, f64, i64);

/// What the Tools view reads of a stored ToolShape view.
#[derive(Debug, Clone)]
pub(crate) struct ShapeSummary {
    status: String,
    contract: Option<ContractState>,
    /// Whether any call reached the tool's state (a tool only declared in a tool list has none).
    called: bool,
}

/// The Tools view: every tool called in the window, plus tools with shape history but no recent call.
pub(crate) fn tool_summaries(
    declared: &BTreeSet<(String, String)>,
    shapes: HashMap<(String, String), ShapeSummary>,
    calls: Vec<CallStats>,
) -> Result<Vec<ToolSummary>, StoreError> {
    let mut tools = Vec::new();
    let mut seen = BTreeSet::new();
    for (server, tool, calls, errors, avg, last) in calls {
        let key = (server, tool);
        let shape = shapes.get(&key);
        tools.push(ToolSummary {
            shape_status: shape.map_or_else(|| "priming 0/?".into(), |s| s.status.clone()),
            contract: shape.and_then(|s| s.contract),
            declared: declared.contains(&key),
            calls,
            errors,
            avg_latency_ms: avg,
            last_called_at: Some(timestamp(last)?),
            server: key.0.clone(),
            tool: key.1.clone(),
        });
        seen.insert(key);
    }
    for (key, shape) in shapes {
        if !seen.contains(&key) && shape.called {
            tools.push(ToolSummary {
                declared: declared.contains(&key),
                server: key.0,
                tool: key.1,
                calls: 0,
                errors: 0,
                avg_latency_ms: 0.0,
                last_called_at: None,
                shape_status: shape.status,
                contract: shape.contract,
            });
        }
    }
    tools.sort_by(|a, b| (&a.server, &a.tool).cmp(&(&b.server, &b.tool)));
    Ok(tools)
}

/// The status line and contract state of a stored ToolShape view.
pub(crate) fn shape_status(json: &str) -> Result<ShapeSummary, StoreError> {
    let shape = serde_json::from_str::<ToolShape>(json)?;
    let telemetry = shape.telemetry;
    Ok(ShapeSummary {
        status: shape.status,
        contract: shape.contract.map(|c| c.state),
        called: telemetry.successful_calls + telemetry.not_success > 0,
    })
}

/// Names, on each server, the tools whose returns mismatch their declared output.
pub(crate) fn with_contract_mismatches(
    mut servers: Vec<driftline_schemas::api::ServerHealth>,
    mut mismatched: BTreeMap<String, Vec<String>>,
) -> Vec<driftline_schemas::api::ServerHealth> {
    for server in &mut servers {
        server.contract_mismatches = mismatched.remove(&server.server_name).unwrap_or_default();
    }
    servers
}

/// Tools whose contract reads `mismatch`, per server, from stored ToolShape views (server, tool, JSON).
pub(crate) fn contract_mismatches(
    rows: impl IntoIterator<Item = (String, String, String)>,
) -> Result<BTreeMap<String, Vec<String>>, StoreError> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (server, tool, json) in rows {
        let shape = serde_json::from_str::<ToolShape>(&json)?;
        if shape.contract.is_some_and(|c| c.state == ContractState::Mismatch) {
            out.entry(server).or_default().push(tool);
        }
    }
    for tools in out.values_mut() {
        tools.sort();
    }
    Ok(out)
}

/// Return-value statistics from (server, tool, status, shape outcome, count) rows.
pub(crate) fn return_value_stats(
    hours: u32,
    rows: Vec<(String, String, String, String, u64)>,
) -> ReturnValueStats {
    let mut per_tool: BTreeMap<(String, String), Vec<OutcomeRow>> = BTreeMap::new();
    let mut all = Vec::new();
    for (server, tool, status, outcome, n) in rows {
        all.push((status.clone(), outcome.clone(), n));
        per_tool.entry((server, tool)).or_default().push((status, outcome, n));
    }
    let tools = per_tool
        .into_iter()
        .map(|((server, tool), rows)| {
            let counts = outcome_counts(&rows);
            ToolOutcomeStats {
                server,
                tool,
                truncation_rate: rate(counts.truncated_sentinel, counts.successful_calls),
                counts,
            }
        })
        .collect();
    let totals = outcome_counts(&all);
    ReturnValueStats {
        window_hours: hours,
        truncation_rate: rate(totals.truncated_sentinel, totals.successful_calls),
        totals,
        tools,
    }
}

/// A drift history being answered, newest event first: events keep their tool lists while the stored
/// text read so far stays within `list_bytes` (the newest always keeps them); the rest come
/// [`SchemaDriftEvent::without_lists`]. Both stores read rows one at a time into it.
pub(crate) struct History {
    events: Vec<SchemaDriftEvent>,
    read: usize,
    list_bytes: usize,
}

impl History {
    pub(crate) fn new(list_bytes: usize) -> Self {
        History { events: Vec::new(), read: 0, list_bytes }
    }

    /// The next older event, read from `stored_bytes` of stored text.
    pub(crate) fn push(&mut self, stored_bytes: usize, event: SchemaDriftEvent) {
        self.read = self.read.saturating_add(stored_bytes);
        let within = self.events.is_empty() || self.read <= self.list_bytes;
        self.events.push(if within { event } else { event.without_lists() });
    }

    pub(crate) fn into_events(self) -> Vec<SchemaDriftEvent> {
        self.events
    }
}

/// The impact view of a tool: its callers, rated by the worst open change touching it (`open_changes`: the
/// stored JSON array of each open event's changes — not the events, whose tool lists can be large) and, where
/// their spans recorded arguments, by what `input_schema` makes of their real calls.
pub(crate) fn drift_impact(
    query: &ImpactQuery<'_>,
    open_changes: Vec<String>,
    agents: Vec<AgentStats>,
    total_sessions: u64,
    input_schema: Option<&Value>,
) -> Result<DriftImpact, StoreError> {
    let mut worst: Option<Classification> = None;
    for json in open_changes {
        let changes: Vec<SchemaChange> = serde_json::from_str(&json)?;
        for change in changes.iter().filter(|c| c.tool_name == query.tool) {
            worst = worst.max(Some(change.classification));
        }
    }
    let schema = input_schema.map(driftline_detectors::contract::CompiledOutput::new);
    let consumers = agents
        .into_iter()
        .map(|agent| {
            let arguments = schema.as_ref().and_then(|schema| check_arguments(schema, &agent));
            // Real calls decide where they were recorded: one rejected call makes the agent HIGH, calls that
            // all pass keep it below; without them, how much it uses the tool does.
            let risk = match (worst, &arguments) {
                (None | Some(Classification::Compatible), _) => Risk::Low,
                (Some(_), Some(check)) if check.rejected_calls > 0 => Risk::High,
                (Some(_), Some(check)) if check.unknown_calls == 0 => Risk::Medium,
                (Some(_), _) if agent.sessions >= query.high_risk_sessions => Risk::High,
                (Some(_), _) => Risk::Medium,
            };
            Ok(ToolConsumer {
                session_count: agent.sessions,
                call_count: agent.calls,
                error_count: agent.errors,
                avg_latency_ms: agent.avg_latency_ms,
                last_called_at: timestamp(agent.last_call_ms)?,
                agent_name: agent.agent,
                risk,
                arguments,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(DriftImpact {
        server_name: query.server.to_owned(),
        tool_name: query.tool.to_owned(),
        window_hours: query.hours,
        message: consumers.is_empty().then(|| NO_RECENT_CALLERS.to_owned()),
        consumers,
        total_sessions,
    })
}

/// An agent's recorded argument shapes against the tool's input schema; `None` when none was recorded.
fn check_arguments(
    schema: &driftline_detectors::contract::CompiledOutput,
    agent: &AgentStats,
) -> Option<ArgumentCheck> {
    use driftline_detectors::contract::Verdict;
    if agent.arguments.is_empty() {
        return None;
    }
    let mut check = ArgumentCheck {
        unknown_calls: agent.calls.saturating_sub(agent.arguments.total()) + agent.arguments.other(),
        ..ArgumentCheck::default()
    };
    let mut reasons: HashMap<String, u64> = HashMap::new();
    for (shape, calls) in agent.arguments.shapes() {
        match schema.check_arguments(shape) {
            Verdict::Admitted => check.accepted_calls += calls,
            Verdict::Inconclusive => check.unknown_calls += calls,
            Verdict::Mismatch(found) => {
                check.rejected_calls += calls;
                if let Some(first) = found.first() {
                    *reasons.entry(first.to_string()).or_default() += calls;
                }
            }
        }
    }
    let mut reasons: Vec<(String, u64)> = reasons.into_iter().collect();
    reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    check.reasons = reasons.into_iter().take(ArgumentCheck::MAX_REASONS).map(|(reason, _)| reason).collect();
    Some(check)
}

/// The start (Unix ms) of a window of `hours` ending at `now`.
pub(crate) fn since(now: Timestamp, hours: u32) -> i64 {
    ms(now) - i64::from(hours) * 3_600_000
}

/// Every bucket of the query, empty ones included, from the aggregates of the buckets that had calls
/// (keyed by bucket index from `from`).
pub(crate) fn call_buckets(
    query: &crate::BucketQuery<'_>,
    mut aggregates: BTreeMap<i64, BucketAggregate>,
) -> Result<Vec<driftline_schemas::api::CallBucket>, StoreError> {
    (0..query.len() as i64)
        .map(|index| {
            let aggregate = aggregates.remove(&index).unwrap_or_default();
            Ok(driftline_schemas::api::CallBucket {
                start: timestamp(ms(query.from) + index * query.bucket_ms)?,
                calls: aggregate.calls,
                errors: aggregate.errors,
                p50_ms: aggregate.p50_ms,
                p95_ms: aggregate.p95_ms,
                fingerprinted: aggregate.fingerprinted,
                dominant_share: (aggregate.fingerprinted > 0)
                    .then(|| aggregate.dominant as f64 / aggregate.fingerprinted as f64),
            })
        })
        .collect()
}

/// Stored signals (JSON), oldest first.
pub(crate) fn signals(rows: impl IntoIterator<Item = String>) -> Result<Vec<ShapeDriftSignal>, StoreError> {
    rows.into_iter().map(|json| Ok(serde_json::from_str(&json)?)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollup::ArgumentShapes;

    const NOW_MS: i64 = 1_780_000_000_000;

    fn agent(name: &str, calls: u64, sessions: u64, sent: &[(&str, u64)]) -> AgentStats {
        let mut arguments = ArgumentShapes::default();
        for (value, n) in sent {
            let shape =
                driftline_detectors::shape::fingerprint(value.as_bytes(), 1 << 20).shape.expect("a shape");
            (0..*n).for_each(|_| arguments.insert(&shape));
        }
        AgentStats {
            agent: name.into(),
            sessions,
            calls,
            errors: 0,
            avg_latency_ms: 1.0,
            last_call_ms: NOW_MS,
            arguments,
        }
    }

    fn impact(
        changes: &str,
        agents: Vec<AgentStats>,
        schema: Option<Value>,
    ) -> Vec<(String, Risk, Option<ArgumentCheck>)> {
        let query = ImpactQuery {
            project: "p",
            server: "srv",
            tool: "search",
            hours: 24,
            now: Timestamp::from_millis(NOW_MS).expect("a time"),
            high_risk_sessions: 10,
            input_schema: None,
        };
        let impact =
            drift_impact(&query, vec![changes.to_owned()], agents, 1, schema.as_ref()).expect("impact");
        impact.consumers.into_iter().map(|c| (c.agent_name, c.risk, c.arguments)).collect()
    }

    const BREAKING: &str = r#"[{"tool_name":"search","change_type":"param_became_required","classification":"BREAKING",
        "param_name":"filters","path":"filters","direction":"input","before":false,"after":true,"security_flags":[]}]"#;

    fn schema() -> Value {
        serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}, "filters": {"type": "object"}},
            "required": ["q", "filters"]})
    }

    #[test]
    fn observed_calls_decide_the_risk_where_arguments_were_recorded() {
        let agents = vec![
            agent("planner", 24, 1, &[(r#"{"q":"a"}"#, 23), (r#"{"q":"a","filters":{}}"#, 1)]),
            agent("researcher", 30, 30, &[(r#"{"q":"a","filters":{"x":1}}"#, 30)]),
            agent("legacy", 40, 40, &[]),
        ];
        let found = impact(BREAKING, agents, Some(schema()));
        let planner = ArgumentCheck {
            rejected_calls: 23,
            accepted_calls: 1,
            unknown_calls: 0,
            reasons: vec!["filters: required by the declared schema, missing".into()],
        };
        let researcher = ArgumentCheck { accepted_calls: 30, ..ArgumentCheck::default() };
        assert_eq!(
            found,
            vec![
                ("planner".into(), Risk::High, Some(planner)),
                ("researcher".into(), Risk::Medium, Some(researcher)),
                // Nothing recorded: its many sessions make it HIGH, as before.
                ("legacy".into(), Risk::High, None),
            ]
        );
    }

    #[test]
    fn calls_without_recorded_arguments_are_unknown_never_rejected() {
        let agents = vec![agent("mixed", 10, 1, &[(r#"{"q":"a","filters":{}}"#, 4)])];
        let found = impact(BREAKING, agents, Some(schema()));
        let check = ArgumentCheck { accepted_calls: 4, unknown_calls: 6, ..ArgumentCheck::default() };
        assert_eq!(found, vec![("mixed".into(), Risk::Medium, Some(check))]);
        let agents = vec![agent("mixed", 10, 1, &[(r#"{"q":1}"#, 4)])];
        let check = impact(BREAKING, agents, None);
        assert_eq!(check, vec![("mixed".into(), Risk::Medium, None)], "no schema known: no check");
    }

    #[test]
    fn without_an_open_change_the_risk_stays_low_and_the_check_still_reads() {
        let agents = vec![agent("planner", 2, 1, &[(r#"{"q":1,"filters":{}}"#, 2)])];
        let found = impact("[]", agents, Some(schema()));
        let check = ArgumentCheck {
            rejected_calls: 2,
            reasons: vec!["q: declared string, sent number".into()],
            ..ArgumentCheck::default()
        };
        assert_eq!(found, vec![("planner".into(), Risk::Low, Some(check))]);
    }
}
