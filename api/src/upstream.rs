//! Upcoming releases (issue #46): what a watched server's next release, captured in a sandbox by the
//! upstream watcher, would change, and whose calls it would break.

use std::collections::{BTreeMap, HashMap};

use axum::extract::{Path, Query, State};
use driftline_schemas::api::DriftImpact;
#[allow(unused_imports)] // named in the OpenAPI annotations
use driftline_schemas::api::ErrorBody;
use driftline_schemas::{Classification, UpcomingRelease};
use driftline_store::ImpactQuery;
use serde::Serialize;
use serde_json::Value;

use driftline_http::{server_name, tool_name, ApiError, Params, Reader};

use crate::{ok, Answer, ApiState};

/// A server's releases, newest first; the newest with the impact on its callers.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ServerUpcoming {
    pub releases: Vec<UpcomingRelease>,
    /// Per tool the newest release breaks or changes (BREAKING or WARNING), who called it in the window and,
    /// where calls recorded argument shapes, how many the release's input schema would reject; a tool the
    /// release removes fails every call.
    pub impact: Vec<UpcomingImpact>,
    pub hours: u32,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct UpcomingImpact {
    pub tool_name: String,
    /// The release drops the tool.
    pub removed: bool,
    /// Calls in the window the release would reject: all of a removed tool's, else those whose argument
    /// shapes its input schema refuses.
    pub rejected_calls: u64,
    pub impact: DriftImpact,
}

#[utoipa::path(get, path = "/api/upstream", tag = "upstream",
    responses((status = 200, body = [UpcomingRelease])))]
pub(crate) async fn upcoming(State(state): State<ApiState>, who: Reader) -> Answer {
    let mut releases = state.store.upcoming(&who.project, None).await.map_err(ApiError::store_unavailable)?;
    // The list answers what each release changes; a server's page carries the lists.
    for release in &mut releases {
        release.release_tools = Default::default();
    }
    ok(releases)
}

#[utoipa::path(get, path = "/api/upstream/{name}", tag = "upstream",
    params(("name" = String, Path, description = "Server name"), ("hours" = Option<u32>, Query, description = "Window of calls for the impact, 1-720, default 24")),
    responses((status = 200, body = ServerUpcoming), (status = 400, body = ErrorBody)))]
pub(crate) async fn server_upcoming(
    State(state): State<ApiState>,
    who: Reader,
    Path(name): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Answer {
    let name = server_name(&name)?;
    let hours = Params(params).int("hours", 24, 1, 720)?;
    let releases =
        state.store.upcoming(&who.project, Some(&name)).await.map_err(ApiError::store_unavailable)?;
    let mut impact = Vec::new();
    if let Some(newest) = releases.first() {
        let schemas: BTreeMap<String, Value> = newest
            .release_tools
            .values()
            .into_iter()
            .filter_map(|tool| {
                let name = tool.get("name")?.as_str()?.to_owned();
                Some((name, tool.get("inputSchema").cloned().unwrap_or(Value::Object(Default::default()))))
            })
            .collect();
        let mut tools: Vec<&str> = newest
            .changes
            .iter()
            .filter(|change| change.classification >= Classification::Warning && !change.tool_name.is_empty())
            .map(|change| change.tool_name.as_str())
            .collect();
        tools.sort_unstable();
        tools.dedup();
        for tool in tools {
            let Ok(checked) = tool_name(tool) else { continue };
            let schema = schemas.get(tool);
            let query = ImpactQuery {
                project: &who.project,
                server: &name,
                tool: &checked,
                hours,
                now: (state.clock)(),
                high_risk_sessions: state.high_risk_sessions,
                input_schema: schema,
            };
            let mut found = state.store.drift_impact(query).await.map_err(ApiError::store_unavailable)?;
            if schema.is_none() {
                // Every call of a tool the release drops fails: each caller is at high risk, however few
                // its sessions.
                for consumer in &mut found.consumers {
                    consumer.risk = driftline_schemas::api::Risk::High;
                }
            }
            if found.consumers.is_empty() {
                continue;
            }
            let rejected_calls = match schema {
                None => found.consumers.iter().map(|c| c.call_count).sum(),
                Some(_) => found
                    .consumers
                    .iter()
                    .filter_map(|c| c.arguments.as_ref())
                    .map(|a| a.rejected_calls)
                    .sum(),
            };
            impact.push(UpcomingImpact {
                tool_name: tool.to_owned(),
                removed: schema.is_none(),
                rejected_calls,
                impact: found,
            });
        }
    }
    ok(ServerUpcoming { releases, impact, hours })
}

/// Which release to accept ahead.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AcceptAhead {
    /// A version the upstream watcher captured for the server.
    version: String,
}

/// Accepts an upcoming release ahead (admin key): when the server's list becomes the release's (the probe
/// or an agent sees it running), it becomes the baseline at once and its drift event is recorded as
/// accepted, without waiting for `drift-accept`.
#[utoipa::path(post, path = "/api/upstream/{name}/accept", tag = "upstream",
    params(("name" = String, Path, description = "Server name")),
    request_body(content = AcceptAhead),
    responses((status = 200, description = "Applied"), (status = 202, description = "Queued behind the data"),
        (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn accept_ahead(
    State(state): State<ApiState>,
    caller: driftline_http::Admin,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Answer {
    let who = caller.into_principal();
    let name = server_name(&name)?;
    let asked: AcceptAhead = serde_json::from_slice(&body)
        .map_err(|err| ApiError::bad_request(format!("body must be {{\"version\": \"…\"}}: {err}")))?;
    let releases =
        state.store.upcoming(&who.project, Some(&name)).await.map_err(ApiError::store_unavailable)?;
    let Some(release) = releases.iter().find(|r| r.version == asked.version && r.error.is_none()) else {
        return Err(ApiError::not_found(format!(
            "no captured release {:?} of server {name:?} in this project",
            asked.version
        )));
    };
    let id = crate::routes::command_id(&state, "accept-release", &format!("{}/{name}", who.project));
    let command = driftline_schemas::OperatorCommand::AcceptRelease {
        id,
        project: who.project,
        server: name,
        version: release.version.clone(),
        release_hash: release.release_hash.clone(),
        accepted_by: who.name,
    };
    crate::routes::run_command(&state, command).await
}
