//! HTTP ingest (DESIGN.md §7): validates spans and tool lists, computes return-value shapes at the edge
//! (return values go no further), and publishes keyed records. 202 means the bus has the data durably.
//! A batch is accepted or rejected whole; a rejection names every bad element.

mod events;
pub mod grpc;
pub mod list_budget;
mod metrics;
pub mod otlp;

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use driftline_bus::{Message, Producer, Topic};
use driftline_detectors::shape::{is_interim_result, record_from_span};
use driftline_http::{server_name, ApiError, Auth, Ingester};
use driftline_schemas::api::{ErrorBody, ErrorDetail};
use driftline_schemas::{
    ProjectName, ServerName, ServerSurfaces, SnapshotSource, Timestamp, ToolCallSpan, ToolListLimits,
    ToolListSnapshot, ToolListTooLarge, ToolName,
};
use events::{Emit, Outcome, ShapeRecorded, SpanBatchReceived, ToolListReceived, TracesReceived};
use list_budget::ListWorkBudget;
pub use list_budget::ListWorkLimits;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use utoipa::openapi::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Limits of one request (DESIGN.md §7).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_spans_per_batch: usize,
    pub tool_lists: ToolListLimits,
    /// Tool-list work each project may send ([`list_budget`]).
    pub list_work: ListWorkLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 5 * 1024 * 1024,
            max_spans_per_batch: 1000,
            tool_lists: ToolListLimits::default(),
            list_work: ListWorkLimits::default(),
        }
    }
}

#[derive(Clone)]
pub struct IngestState {
    pub producer: Arc<dyn Producer>,
    pub auth: Arc<Auth>,
    pub limits: Limits,
    pub clock: fn() -> Timestamp,
    /// Each project's budget of tool-list work (made from `limits.list_work`).
    pub list_budget: Arc<ListWorkBudget>,
    /// `otlp.servers`: names for servers that client spans know only by address.
    pub otlp_servers: Arc<otlp::ServerNames>,
}

impl axum::extract::FromRef<IngestState> for Arc<Auth> {
    fn from_ref(state: &IngestState) -> Arc<Auth> {
        state.auth.clone()
    }
}

/// Ingest's routes and their OpenAPI description, generated from the handlers.
pub fn router(state: IngestState) -> (Router, OpenApi) {
    OpenApiRouter::new()
        .routes(routes!(spans))
        .routes(routes!(tool_list))
        .routes(routes!(traces))
        // Bodies are read (and limited) by the handlers, to answer 413 with a JSON body.
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
        .split_for_parts()
}

/// Reads at most `limit` bytes; a body that declares or turns out to be larger is 413. Served by
/// `driftline serve`, the body middleware has already read it under the server's limits (one frame, no
/// copy here); this keeps the route's own limit wherever the router is served without it.
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let too_large =
        || ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, format!("request body is larger than {limit} bytes"));
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, limit).await.map_err(|_| too_large())
}

fn accepted(body: Value) -> Response {
    (StatusCode::ACCEPTED, Json(body)).into_response()
}

#[utoipa::path(post, path = "/v1/spans", tag = "ingest",
    request_body(content = [ToolCallSpan], description = "At most 1000 spans and 5 MiB; accepted or rejected whole"),
    responses((status = 202, description = "Durable on the bus: {\"accepted\": n}"),
        (status = 400, description = "Each bad span's index and reason", body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 503, description = "Bus unavailable; retry", body = ErrorBody)))]
async fn spans(
    State(state): State<IngestState>,
    who: Ingester,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let result = accept_spans(&state, &who.project, &headers, body).await;
    let spans = result.as_ref().map_or(1, |count| *count as u64);
    SpanBatchReceived { project: &who.project, outcome: outcome_of(&result), spans }.emit();
    result.map(|count| accepted(json!({"accepted": count})))
}

/// What became of a request, for its counter: 503 is the bus, 429 a budget, any other error the data.
fn outcome_of<T>(result: &Result<T, ApiError>) -> Outcome {
    match result {
        Ok(_) => Outcome::Accepted,
        Err(err) if err.status == StatusCode::SERVICE_UNAVAILABLE => Outcome::Unavailable,
        Err(err) if err.status == StatusCode::TOO_MANY_REQUESTS => Outcome::OverBudget,
        Err(_) => Outcome::Rejected,
    }
}

/// Validates, fingerprints and publishes one batch; returns how many spans it accepted.
async fn accept_spans(
    state: &IngestState,
    project: &ProjectName,
    headers: &HeaderMap,
    body: Body,
) -> Result<usize, ApiError> {
    let bytes = read_body(headers, body, state.limits.max_body_bytes).await?;
    // Elements stay raw so a bad one can be named by index and return values are never parsed into trees.
    let elements: Vec<&RawValue> = parse_body(&bytes, "a JSON array of spans")?;
    if elements.len() > state.limits.max_spans_per_batch {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "{} spans in one request; at most {} are accepted",
                elements.len(),
                state.limits.max_spans_per_batch
            ),
        ));
    }
    let now = (state.clock)();
    let mut messages = Vec::with_capacity(elements.len());
    let mut problems = Vec::new();
    for (index, element) in elements.iter().enumerate() {
        match read_span(element, project) {
            Ok(span) => {
                let record = record_from_span(&span, project, now);
                count_outcome(&span, &record);
                match serde_json::to_vec(&record) {
                    Ok(payload) => {
                        messages.push(Message { topic: Topic::Spans, key: record.key().to_string(), payload })
                    }
                    Err(err) => problems.push(ErrorDetail { index, reason: err.to_string() }),
                }
            }
            Err(reason) => problems.push(ErrorDetail { index, reason }),
        }
    }
    if !problems.is_empty() {
        let error = format!("{} of {} spans are invalid; none were accepted", problems.len(), elements.len());
        return Err(ApiError::bad_request(error).with_details(problems));
    }
    let count = messages.len();
    state.producer.publish(messages).await?;
    tracing::debug!(%project, spans = count, "spans accepted");
    Ok(count)
}

fn parse_body<'a, T: Deserialize<'a>>(bytes: &'a [u8], expected: &str) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|err| {
        let kind = if std::str::from_utf8(bytes).is_err() { "body is not UTF-8" } else { "malformed JSON" };
        ApiError::bad_request(format!("{kind}: expected {expected}: {err}"))
    })
}

/// Counts a span's shape outcome; an MCP 2026-07-28 interim result (`input_required`, recorded without a
/// shape) is counted apart from values that are absent.
fn count_outcome(span: &ToolCallSpan, record: &driftline_schemas::ToolCallRecord) {
    let interim = span.return_value.as_deref().is_some_and(|raw| is_interim_result(raw.get()));
    ShapeRecorded { outcome: record.shape_outcome, interim, span }.emit();
}

fn read_span(element: &RawValue, project: &ProjectName) -> Result<ToolCallSpan, String> {
    let span: ToolCallSpan = serde_json::from_str(element.get()).map_err(|err| err.to_string())?;
    span.check()?;
    match &span.project {
        Some(other) if other != project => {
            Err(format!("project {other:?} does not match this API key's project"))
        }
        _ => Ok(span),
    }
}

/// `PUT /api/servers/{name}/tools` accepts the tools array, `{"tools": [...], "captured_at": ...}`, or a
/// JSON-RPC `tools/list` response (`{"result": {"tools": [...]}}`). Either object may carry the list
/// result's own fields as the MCP SDKs serialise them (`ttlMs`, `cacheScope`, `resultType` of 2026-07-28,
/// `nextCursor`, `_meta`): read and checked, never part of the list or its hash.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WrappedToolList {
    tools: Vec<Value>,
    #[serde(default)]
    captured_at: Option<Timestamp>,
    #[serde(default)]
    source: Option<SnapshotSource>,
    /// Set on a page that is not the last: such a body is not the whole list.
    #[serde(default, rename = "nextCursor")]
    next_cursor: Option<String>,
    /// How long a client may cache the list, and for whom (2026-07-28): driftline's probes keep their
    /// own interval, so these are checked for their type only.
    #[serde(default, rename = "ttlMs")]
    _ttl_ms: Option<u64>,
    #[serde(default, rename = "cacheScope")]
    _cache_scope: Option<String>,
    /// `complete` for a list (2026-07-28); anything else is no list.
    #[serde(default, rename = "resultType")]
    result_type: Option<String>,
    #[serde(default, rename = "_meta")]
    _meta: Option<serde_json::Map<String, Value>>,
    /// What the server shows the model besides its tools, as MCP names them.
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    prompts: Option<Vec<Value>>,
    #[serde(default)]
    resources: Option<Vec<Value>>,
    #[serde(default, rename = "resourceTemplates")]
    resource_templates: Option<Vec<Value>>,
}

impl WrappedToolList {
    /// The surfaces the body captured, if any.
    fn surfaces(&mut self) -> Option<ServerSurfaces> {
        let surfaces = ServerSurfaces {
            instructions: self.instructions.take(),
            prompts: self.prompts.take(),
            resources: self.resources.take(),
            resource_templates: self.resource_templates.take(),
        };
        (!surfaces.is_uncaptured()).then_some(surfaces)
    }
}

/// What a PUT body holds.
struct ToolListBody {
    tools: Vec<Value>,
    captured_at: Timestamp,
    source: SnapshotSource,
    surfaces: Option<ServerSurfaces>,
}

/// A JSON-RPC `tools/list` result, read as a client reads it: its tools, and whether it is whole.
#[derive(Deserialize)]
struct ToolsResult {
    tools: Vec<Value>,
    #[serde(default, rename = "nextCursor")]
    next_cursor: Option<String>,
    #[serde(default, rename = "resultType")]
    result_type: Option<String>,
}

/// A list result that is the whole list: no further page, and a complete result.
fn whole_list(next_cursor: Option<&str>, result_type: Option<&str>) -> Result<(), ApiError> {
    let quoted = |text: &str| text.chars().take(40).collect::<String>();
    if let Some(cursor) = next_cursor {
        return Err(ApiError::bad_request(format!(
            "this is one page of the list (nextCursor {:?}): send every page's tools in one list",
            quoted(cursor)
        )));
    }
    match result_type {
        None | Some("complete") => Ok(()),
        Some(other) => Err(ApiError::bad_request(format!(
            "resultType {:?} is no tool list (expected \"complete\")",
            quoted(other)
        ))),
    }
}

const TOOL_LIST_FORMS: &str = r#"the tools array, {"tools": [...], "captured_at": "<RFC 3339>"}, or a tools/list response {"result": {"tools": [...]}}"#;

fn read_tool_list(bytes: &[u8], now: Timestamp) -> Result<ToolListBody, ApiError> {
    let body: Value = parse_body(bytes, TOOL_LIST_FORMS)?;
    let unexpected =
        |err: serde_json::Error| ApiError::bad_request(format!("expected {TOOL_LIST_FORMS}: {err}"));
    match body {
        Value::Array(tools) => {
            Ok(ToolListBody { tools, captured_at: now, source: SnapshotSource::Api, surfaces: None })
        }
        Value::Object(mut object) if object.contains_key("result") => {
            let result = object.remove("result").unwrap_or_default();
            let result: ToolsResult = serde_json::from_value(result).map_err(unexpected)?;
            whole_list(result.next_cursor.as_deref(), result.result_type.as_deref())?;
            Ok(ToolListBody {
                tools: result.tools,
                captured_at: now,
                source: SnapshotSource::Api,
                surfaces: None,
            })
        }
        object @ Value::Object(_) => {
            let mut wrapped: WrappedToolList = serde_json::from_value(object).map_err(unexpected)?;
            whole_list(wrapped.next_cursor.as_deref(), wrapped.result_type.as_deref())?;
            let surfaces = wrapped.surfaces();
            Ok(ToolListBody {
                captured_at: wrapped.captured_at.unwrap_or(now),
                source: wrapped.source.unwrap_or(SnapshotSource::Api),
                tools: wrapped.tools,
                surfaces,
            })
        }
        _ => Err(ApiError::bad_request(format!("expected {TOOL_LIST_FORMS}"))),
    }
}

#[utoipa::path(put, path = "/api/servers/{name}/tools", tag = "ingest",
    params(("name" = String, Path, description = "Server name: 1-256 of A-Z a-z 0-9 . _ : @ -")),
    request_body(content = Object, description = "The tools array, {\"tools\": [...], \"captured_at\": ...}, or a tools/list response"),
    responses((status = 202, description = "Durable on the bus"), (status = 400, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 429, description = "The project sent more tool-list work than its budget: Retry-After says when to send it again", body = ErrorBody)))]
async fn tool_list(
    State(state): State<IngestState>,
    who: Ingester,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let result = accept_tool_list(&state, &who.project, &name, &headers, body).await;
    let detail: &dyn std::fmt::Display = match &result {
        Ok((_, count)) => count,
        Err(err) => &err.body.error,
    };
    ToolListReceived { project: &who.project, server: &name, outcome: outcome_of(&result), detail }.emit();
    result.map(|(name, count)| accepted(json!({"server": name, "tools": count})))
}

/// Checks a tool list and puts it on the bus: the server's name and the list's tool count.
async fn accept_tool_list(
    state: &IngestState,
    project: &ProjectName,
    name: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<(ServerName, usize), ApiError> {
    let name = server_name(name)?;
    let bytes = read_body(headers, body, state.limits.max_body_bytes).await?;
    let ToolListBody { tools, captured_at, source, surfaces } = read_tool_list(&bytes, (state.clock)())?;
    let limits = &state.limits.tool_lists;
    let checked = driftline_detectors::tool_drift::check_tool_list_work(limits, &tools, bytes.len())
        .and_then(|work| surfaces.as_ref().map_or(Ok(work), |s| limits.check_surfaces(s).map(|()| work)));
    let work = match checked {
        Ok(work) => work,
        // Told per tool, with every bad name, just below.
        Err(ToolListTooLarge::ToolName(..)) => 0,
        Err(
            err @ (ToolListTooLarge::Tools(..)
            | ToolListTooLarge::RefExpansion(..)
            | ToolListTooLarge::SurfaceEntries(..)),
        ) => return Err(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, err.to_string())),
        Err(err) => return Err(ApiError::bad_request(err.to_string())),
    };
    let mut problems = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for (index, tool) in tools.iter().enumerate() {
        let reason = match tool.get("name") {
            _ if !tool.is_object() => Some("a tool must be a JSON object".to_owned()),
            // The rules spans' tool names meet: a tool a list declares can be called and looked up.
            Some(Value::String(n)) => match ToolName::parse(n.as_str()) {
                Err(err) => Some(err.to_string()),
                Ok(_) if !names.insert(n.clone()) => Some(format!("duplicate tool name {n:?}")),
                Ok(_) => None,
            },
            _ => Some("name must be a string".to_owned()),
        };
        if let Some(reason) = reason {
            problems.push(ErrorDetail { index, reason });
        }
    }
    if !problems.is_empty() {
        return Err(ApiError::bad_request(format!(
            "{} of {} tools are invalid; the list was not accepted",
            problems.len(),
            tools.len()
        ))
        .with_details(problems));
    }
    // Charged once the list is known good: a refused list costs the detector nothing.
    if let Err(over) = state.list_budget.take(project, work, std::time::Instant::now()) {
        let retry_after = over.retry_after.as_secs().max(1);
        let budget = state.list_budget.limits();
        let mut refused = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "this list costs the detector {work} bytes of schema work and project {} has sent more than its budget (limits.tool_list_work_per_second = {}, limits.tool_list_work_burst = {}): send it again in {retry_after} s",
                project, budget.per_second, budget.burst
            ),
        );
        refused.retry_after = Some(u32::try_from(retry_after).unwrap_or(u32::MAX));
        return Err(refused);
    }
    let snapshot = ToolListSnapshot {
        schema_version: driftline_schemas::SCHEMA_VERSION,
        project: project.clone(),
        server: name.clone(),
        captured_at,
        source,
        latency_ms: None,
        tools,
        surfaces,
        release: None,
    };
    let payload = serde_json::to_vec(&snapshot).map_err(|err| ApiError::bad_request(err.to_string()))?;
    let count = snapshot.tools.len();
    if let Err(err) = state
        .producer
        .publish(vec![Message { topic: Topic::ToolLists, key: snapshot.key().to_string(), payload }])
        .await
    {
        return Err(err.into());
    }
    Ok((name, count))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum OtlpEncoding {
    Protobuf,
    Json,
}

/// The OTLP answer: partial success naming the first few rejected spans (all of them could be as large as
/// the request).
fn otlp_answer(rejected: &[String]) -> ExportTraceServiceResponse {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTracePartialSuccess;
    const SHOWN: usize = 5;
    let partial_success = (!rejected.is_empty()).then(|| {
        let mut error_message = rejected.iter().take(SHOWN).cloned().collect::<Vec<_>>().join("; ");
        if rejected.len() > SHOWN {
            error_message.push_str(&format!("; and {} more", rejected.len() - SHOWN));
        }
        ExportTracePartialSuccess { rejected_spans: rejected.len() as i64, error_message }
    });
    ExportTraceServiceResponse { partial_success }
}

/// The OTLP answer, in the encoding of the request.
fn otlp_response(encoding: OtlpEncoding, response: ExportTraceServiceResponse) -> Response {
    match encoding {
        OtlpEncoding::Protobuf => {
            let body = prost::Message::encode_to_vec(&response);
            (StatusCode::OK, [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")], body)
                .into_response()
        }
        OtlpEncoding::Json => (StatusCode::OK, Json(response)).into_response(),
    }
}

#[derive(Debug, Clone, Copy)]
enum Compression {
    Gzip,
    /// HTTP's `deflate` is zlib (RFC 1950); some clients send a bare deflate stream, which is read too.
    Deflate,
}

/// The decompressed body, at most `limit` bytes (a larger one is 413, so a small bomb cannot grow memory).
fn inflate(bytes: &[u8], compression: Compression, limit: usize) -> Result<Vec<u8>, ApiError> {
    use std::io::Read;
    let read = |reader: &mut dyn Read| {
        let mut inflated = Vec::new();
        reader.take(limit as u64 + 1).read_to_end(&mut inflated).map(|n| (n, inflated))
    };
    let result = match compression {
        Compression::Gzip => read(&mut flate2::read::GzDecoder::new(bytes)),
        Compression::Deflate => read(&mut flate2::read::ZlibDecoder::new(bytes))
            .or_else(|_| read(&mut flate2::read::DeflateDecoder::new(bytes))),
    };
    match result {
        Ok((n, _)) if n > limit => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("decompressed body is larger than {limit} bytes"),
        )),
        Ok((_, inflated)) => Ok(inflated),
        Err(err) => {
            let name = match compression {
                Compression::Gzip => "gzip",
                Compression::Deflate => "deflate",
            };
            Err(ApiError::bad_request(format!("body is not valid {name}: {err}")))
        }
    }
}

/// OTLP/HTTP traces: protobuf or JSON, optionally gzip- or deflate-compressed. Tool-call spans become spans; others
/// are counted and skipped (see [`otlp`] for the mapping).
#[utoipa::path(post, path = "/v1/traces", tag = "ingest",
    request_body(content = Object, description = "ExportTraceServiceRequest as application/x-protobuf or application/json (Content-Encoding gzip or deflate allowed; others 415)"),
    responses((status = 200, description = "ExportTraceServiceResponse, with partial_success when tool calls were rejected"),
        (status = 400, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn traces(
    State(state): State<IngestState>,
    who: Ingester,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let content_type =
        headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let media = content_type.split(';').next().map(|m| m.trim().to_ascii_lowercase());
    let encoding = match media.as_deref() {
        Some("application/x-protobuf") => OtlpEncoding::Protobuf,
        Some("application/json") => OtlpEncoding::Json,
        _ => {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("content type {content_type:?}: send application/x-protobuf or application/json"),
            ))
        }
    };
    let limit = state.limits.max_body_bytes;
    let mut bytes = read_body(&headers, body, limit).await?.to_vec();
    let content_encoding = headers
        .get(axum::http::header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase());
    let compression = match content_encoding.as_deref() {
        None | Some("") | Some("identity") => None,
        Some("gzip") | Some("x-gzip") => Some(Compression::Gzip),
        Some("deflate") => Some(Compression::Deflate),
        Some(other) => {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("content encoding {other:?}: send gzip, deflate or no Content-Encoding"),
            ))
        }
    };
    if let Some(compression) = compression {
        bytes = inflate(&bytes, compression, limit)?;
    }
    let request: ExportTraceServiceRequest = match encoding {
        OtlpEncoding::Protobuf => prost::Message::decode(bytes.as_slice())
            .map_err(|err| ApiError::bad_request(format!("not an OTLP ExportTraceServiceRequest: {err}")))?,
        OtlpEncoding::Json => serde_json::from_slice(&bytes)
            .map_err(|err| ApiError::bad_request(format!("not an OTLP ExportTraceServiceRequest: {err}")))?,
    };
    Ok(otlp_response(encoding, export_traces(&state, &who.project, &request).await?))
}

/// One OTLP trace export, over HTTP or gRPC: its tool calls mapped, checked as `/v1/spans` checks spans,
/// and put on the bus before the answer (partial success names the spans refused).
pub(crate) async fn export_traces(
    state: &IngestState,
    project: &ProjectName,
    request: &ExportTraceServiceRequest,
) -> Result<ExportTraceServiceResponse, ApiError> {
    let mapped = otlp::map_request(request, &state.otlp_servers);
    // The same limits and checks as /v1/spans.
    if mapped.spans.len() > state.limits.max_spans_per_batch {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "{} tool-call spans in one request; at most {} are accepted",
                mapped.spans.len(),
                state.limits.max_spans_per_batch
            ),
        ));
    }
    let now = (state.clock)();
    let mut messages = Vec::with_capacity(mapped.spans.len());
    let mut rejected = mapped.rejected;
    for span in &mapped.spans {
        if let Err(reason) = span.check() {
            let id: String = span.span_id.chars().take(64).collect();
            rejected.push(format!("span {id:?}: {reason}"));
            continue;
        }
        let record = record_from_span(span, project, now);
        count_outcome(span, &record);
        match serde_json::to_vec(&record) {
            Ok(payload) => {
                messages.push(Message { topic: Topic::Spans, key: record.key().to_string(), payload })
            }
            Err(err) => rejected.push(format!("span {}: {err}", span.span_id)),
        }
    }
    let accepted_count = messages.len() as u64;
    if !messages.is_empty() {
        if let Err(err) = state.producer.publish(messages).await {
            TracesReceived {
                project,
                tool_calls: accepted_count,
                skipped: &otlp::SkippedSpans::default(),
                rejected: 0,
                unavailable: true,
            }
            .emit();
            return Err(err.into());
        }
    }
    let rejected_count = rejected.len() as u64;
    TracesReceived {
        project,
        tool_calls: accepted_count,
        skipped: &mapped.skipped,
        rejected: rejected_count,
        unavailable: false,
    }
    .emit();
    Ok(otlp_answer(&rejected))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PUT body's tools, or the error it gets.
    fn check(body: serde_json::Value, expected: Result<usize, &str>) {
        let now = Timestamp::parse("2026-12-07T00:00:00Z").expect("a time");
        let got = read_tool_list(body.to_string().as_bytes(), now)
            .map(|body| body.tools.len())
            .map_err(|err| err.body.error);
        match (&got, expected) {
            (Ok(n), Ok(want)) => assert_eq!(*n, want, "{body}"),
            (Err(error), Err(want)) => assert!(error.contains(want), "{body}: {error}"),
            _ => panic!("{body}: got {got:?}, want {expected:?}"),
        }
    }

    #[test]
    fn list_results_in_the_sdks_serialised_form_are_taken() {
        let tool = serde_json::json!({"name": "add", "inputSchema": {"type": "object"}});
        check(serde_json::json!([tool]), Ok(1));
        // MCP 2026-07-28, as the Python SDK 2.x serialises a tools/list result, bare and in JSON-RPC.
        let result = serde_json::json!({"tools": [tool], "ttlMs": 60000, "cacheScope": "session",
            "resultType": "complete", "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s"}}});
        check(result.clone(), Ok(1));
        check(serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": result}), Ok(1));
        // A page that is not the last is not the whole list; nor is an interim result.
        check(serde_json::json!({"tools": [tool], "nextCursor": "abc"}), Err("one page of the list"));
        check(
            serde_json::json!({"result": {"tools": [tool], "nextCursor": "abc"}}),
            Err("one page of the list"),
        );
        check(serde_json::json!({"tools": [], "resultType": "input_required"}), Err("is no tool list"));
        check(serde_json::json!({"tools": [tool], "ttlMs": "soon"}), Err("expected the tools array"));
        check(serde_json::json!({"tools": [tool], "tool": []}), Err("unknown field `tool`"));
    }

    #[test]
    fn a_body_may_carry_the_servers_other_surfaces() {
        let now = Timestamp::parse("2026-12-07T00:00:00Z").expect("a time");
        let body = serde_json::json!({"tools": [], "instructions": "Use search first.",
            "prompts": [{"name": "review"}], "resourceTemplates": [{"uriTemplate": "db://{t}"}]});
        let read = read_tool_list(body.to_string().as_bytes(), now).expect("a body");
        let surfaces = read.surfaces.expect("surfaces");
        assert_eq!(surfaces.instructions.as_deref(), Some("Use search first."));
        assert_eq!((surfaces.prompts.map(|p| p.len()), surfaces.resources), (Some(1), None));
        let tools_only = read_tool_list(br#"{"tools": []}"#, now).expect("a body");
        assert!(tools_only.surfaces.is_none(), "a body of tools only captures nothing else");
    }
}
