//! Declared vs observed, and timelines: `GET /api/tools/{server}/{tool}/contract`,
//! `GET /api/tools/{server}/{tool}/timeline` and `GET /api/health/servers/{name}/timeline`.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
#[allow(unused_imports)] // named in the OpenAPI annotations
use driftline_schemas::api::{ContractReport, ErrorBody, Timeline, TimelineMarker};
use driftline_schemas::{SignalKind, Timestamp};
use driftline_store::rollup::MINUTE_WINDOW_HOURS;
use driftline_store::BucketQuery;

use driftline_http::{server_name, tool_name, ApiError, Params, Reader};

use crate::ApiState;
use crate::{ok, Answer};

/// Bucket sizes a timeline picks from when none is asked for: the smallest giving at most
/// [`DEFAULT_BUCKETS`] buckets.
const BUCKET_LADDER: [i64; 10] = [60, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400];
const DEFAULT_BUCKETS: i64 = 60;
/// At most this many buckets in one timeline (a chart has no use for more, and the query stays bounded).
pub const MAX_BUCKETS: i64 = 1440;
/// Drift events a timeline looks at (newest first); more in a window than this are not drawn.
const MAX_EVENTS: u32 = 100;

#[utoipa::path(get, path = "/api/tools/{server}/{tool}/contract", tag = "tools",
    params(("server" = String, Path, description = "Server name"), ("tool" = String, Path, description = "Tool name")),
    responses((status = 200, description = "The declared output schema next to what the tool returns", body = ContractReport),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn tool_contract(
    State(state): State<ApiState>,
    who: Reader,
    Path((server, tool)): Path<(String, String)>,
) -> Answer {
    let (server, tool) = (server_name(&server)?, tool_name(&tool)?);
    let Some(shape) =
        state.store.tool_shape(&who.project, &server, &tool).await.map_err(ApiError::store_unavailable)?
    else {
        return Err(ApiError::not_found(format!(
            "{server}/{tool} has neither a declared output nor calls in this project"
        )));
    };
    let (agrees, disagreements) = match &shape.contract {
        Some(contract) => (contract.observed_agrees, contract.disagreements.clone()),
        None => (None, Vec::new()),
    };
    ok(ContractReport {
        server: shape.server,
        tool: shape.tool,
        contract: shape.contract,
        observed_shape: shape.baseline_shape,
        observed_hash: shape.baseline_hash,
        observed_share: shape.baseline_share,
        agrees,
        disagreements,
        signal_groups: shape
            .signal_groups
            .into_iter()
            .filter(|group| group.kind == SignalKind::DeclaredOutputMismatch)
            .collect(),
    })
}

#[utoipa::path(get, path = "/api/tools/{server}/{tool}/timeline", tag = "tools",
    params(("server" = String, Path, description = "Server name"), ("tool" = String, Path, description = "Tool name"),
        ("hours" = Option<u32>, Query, description = "1-720, default 24"),
        ("bucket" = Option<String>, Query, description = "Bucket size in whole minutes: seconds (`300`) or `5m`, `1h`, `1d`; 60 s to 30 d, at most 1440 buckets, under whole hours only for up to 48 hours; default: at most 60 buckets")),
    responses((status = 200, description = "Calls, errors, latency and shape share per bucket, with drift markers", body = Timeline),
        (status = 400, body = ErrorBody)))]
pub(crate) async fn tool_timeline(
    State(state): State<ApiState>,
    who: Reader,
    Path((server, tool)): Path<(String, String)>,
    Query(params): Query<HashMap<String, String>>,
) -> Answer {
    let (server, tool) = (server_name(&server)?, tool_name(&tool)?);
    timeline(&state, &who.project, &server, Some(&tool), Params(params)).await
}

#[utoipa::path(get, path = "/api/health/servers/{name}/timeline", tag = "health",
    params(("name" = String, Path, description = "Server name"),
        ("hours" = Option<u32>, Query, description = "1-720, default 24"),
        ("bucket" = Option<String>, Query, description = "As for a tool's timeline")),
    responses((status = 200, description = "All the server's tools together, with drift markers", body = Timeline),
        (status = 400, body = ErrorBody)))]
pub(crate) async fn server_timeline(
    State(state): State<ApiState>,
    who: Reader,
    Path(name): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Answer {
    let name = server_name(&name)?;
    timeline(&state, &who.project, &name, None, Params(params)).await
}

async fn timeline(
    state: &ApiState,
    project: &str,
    server: &str,
    tool: Option<&str>,
    params: Params,
) -> Answer {
    let hours = params.int("hours", 24, 1, 720)?;
    let span_ms = i64::from(hours) * 3_600_000;
    let bucket_s = match params.0.get("bucket") {
        Some(text) => parse_bucket(text)?,
        None => BUCKET_LADDER
            .into_iter()
            .find(|b| span_ms / (b * 1000) <= DEFAULT_BUCKETS)
            .unwrap_or(BUCKET_LADDER[BUCKET_LADDER.len() - 1]),
    };
    let bucket_ms = bucket_s * 1000;
    if span_ms / bucket_ms > MAX_BUCKETS {
        return Err(ApiError::bad_request(format!(
            "{hours} hours in buckets of {bucket_s} s would be more than {MAX_BUCKETS} buckets: use a larger bucket"
        )));
    }
    // Buckets that are not whole hours are read from minute rollups, which cover the last two days.
    if bucket_s % 3600 != 0 && hours > MINUTE_WINDOW_HOURS {
        return Err(ApiError::bad_request(format!(
            "buckets that are not whole hours cover at most {MINUTE_WINDOW_HOURS} hours, not {hours}: use 1h or more"
        )));
    }
    // Buckets are aligned to their size, so the same call always falls in the same bucket; the first and
    // the last bucket reach past the window so that every call of the last `hours` is in one.
    let now = (state.clock)().as_millis();
    let to = (now.div_euclid(bucket_ms) + 1) * bucket_ms;
    let from = (now - span_ms).div_euclid(bucket_ms) * bucket_ms;
    let at = |ms: i64| Timestamp::from_millis(ms).ok_or_else(|| ApiError::bad_request("time out of range"));
    let (from, to) = (at(from)?, at(to)?);
    let query = BucketQuery::new(project, server, tool, from, to, bucket_ms).map_err(|err| match err {
        driftline_store::StoreError::Query(reason) => ApiError::bad_request(reason),
        other => ApiError::store_unavailable(other),
    })?;
    let buckets = state.store.call_buckets(query).await.map_err(ApiError::store_unavailable)?;
    let mut markers = Vec::new();
    let events =
        // Markers need no tool lists.
        state.store.drift_history(project, server, MAX_EVENTS, 0).await.map_err(ApiError::store_unavailable)?;
    for event in events.into_iter().filter(|e| e.detected_at >= from && e.detected_at < to) {
        let changes: Vec<_> =
            event.changes.iter().filter(|c| tool.is_none_or(|tool| c.tool_name == tool)).collect();
        if changes.is_empty() {
            continue;
        }
        // Unlisted changes belong to no known tool: counted when the timeline is the server's.
        let unlisted: u64 = if tool.is_none() { event.omitted_changes.values().sum() } else { 0 };
        let worst = changes.iter().map(|c| c.classification).max();
        markers.push(TimelineMarker {
            at: event.detected_at,
            kind: "drift_event".to_owned(),
            id: event.id.clone(),
            tool: tool.map(str::to_owned),
            label: format!(
                "tool-list drift {} → {}: {} change(s)",
                event.previous_hash,
                event.current_hash,
                changes.len() as u64 + unlisted
            ),
            severity: worst.map_or("NONE", |c| c.as_str()).to_owned(),
        });
    }
    let signals =
        state.store.signals(project, server, tool, from).await.map_err(ApiError::store_unavailable)?;
    for signal in signals {
        let at = signal.call_started_at.unwrap_or(signal.detected_at);
        if at < from || at >= to {
            continue;
        }
        let reasons: Vec<String> = signal.reasons.iter().take(5).map(ToString::to_string).collect();
        let what = match signal.kind {
            SignalKind::ShapeDrift => "return shape drift",
            SignalKind::DeclaredOutputMismatch => "returns mismatch the declared output",
        };
        markers.push(TimelineMarker {
            at,
            kind: signal.kind.as_str().to_owned(),
            id: signal.id,
            tool: Some(signal.tool.clone()),
            label: format!("{}: {what}: {}", signal.tool, reasons.join("; ")),
            severity: signal.ranking.as_str().to_owned(),
        });
    }
    markers.sort_by(|a, b| a.at.cmp(&b.at).then_with(|| a.id.cmp(&b.id)));
    ok(Timeline {
        server: server.to_owned(),
        tool: tool.map(str::to_owned),
        hours,
        bucket_seconds: bucket_s as u32,
        from,
        to,
        buckets,
        markers,
    })
}

/// `300`, `120s`, `5m`, `1h`, `1d` → seconds: whole minutes (what rollups hold), 60 s to 30 days.
fn parse_bucket(text: &str) -> Result<i64, ApiError> {
    let bad = || {
        let shown: String = text.chars().take(40).collect();
        ApiError::bad_request(format!(
            "bucket {shown:?} is not a size: use seconds (300) or a number with s, m, h or d (5m, 1h)"
        ))
    };
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let count: i64 = digits.parse().map_err(|_| bad())?;
    let unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    let seconds = count.checked_mul(unit).ok_or_else(bad)?;
    if !(60..=30 * 86_400).contains(&seconds) {
        return Err(ApiError::bad_request(format!("bucket must be 60 s to 30 days, not {seconds} s")));
    }
    if seconds % 60 != 0 {
        return Err(ApiError::bad_request(format!("bucket must be whole minutes, not {seconds} s")));
    }
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    use super::parse_bucket;

    #[test]
    fn bucket_sizes() {
        for (text, seconds) in [("300", 300), ("5m", 300), ("1h", 3600), ("1d", 86_400), ("120s", 120)] {
            assert_eq!(parse_bucket(text).ok(), Some(seconds), "{text}");
        }
        for text in ["", "5x", "m", "-5m", "59", "90s", "31d", "99999999999999999999h"] {
            assert!(parse_bucket(text).is_err(), "{text}");
        }
    }
}
