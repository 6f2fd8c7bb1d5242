//! OTLP/HTTP trace ingest (`POST /v1/traces`): tool-call spans of any OpenTelemetry-instrumented agent,
//! mapped to ToolCallSpan by the GenAI and MCP semantic conventions. Spans that are not tool calls are
//! counted and skipped; tool calls that cannot be read are rejected by count (OTLP partial success).
//!
//! The mapping, in one place (README "OTLP" has the same table):
//!
//! | ToolCallSpan | taken from (first present) |
//! |---|---|
//! | is a tool call | `gen_ai.operation.name = execute_tool`, or `mcp.method.name = tools/call`, or a span named `mcp.tool.call` with `mcp.tool.name` (Docker MCP Gateway) |
//! | tool | `gen_ai.tool.name`, `mcp.tool.name`, else the span name's `tools/call NAME`; a name `mcp__SERVER__TOOL` (Claude Code, the Claude Agent SDK) is TOOL of SERVER |
//! | server | `mcp.server.name`, the `mcp__SERVER__` of the tool's name, `server.address` (with `:server.port` when set); on an MCP server's own span (kind SERVER) `mcp.server.name`, else the resource `service.name` |
//! | span_id | `gen_ai.tool.call.id`, else the span id (hex) |
//! | trace_id | the trace id (hex) |
//! | session_id | `gen_ai.conversation.id`, `mcp.session.id`, `session.id` |
//! | agent_name | `gen_ai.agent.name`, else resource `service.name`; on a server span `gen_ai.agent.name`, `mcp.client.name` (else unknown) |
//! | started_at, duration_ms | start and end time of the span |
//! | status, error | span status ERROR, an `error.type` (`tool_error` when the result has `isError`), or an `rpc.response.status_code` (a JSON-RPC error) → `error` with the status message, else `error.type`, else the code; otherwise `success` |
//! | return_value | `gen_ai.tool.call.result`: structured (a map or a list) as it is, JSON text parsed, other text a string value |
//! | arguments | `gen_ai.tool.call.arguments` (opt-in in the conventions; structured, or JSON text: its shape is kept, never the values) |

use std::collections::HashMap;

use driftline_schemas::{CallStatus, ServerName, Timestamp, ToolCallSpan, ToolName};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::value::RawValue;

/// What a request held.
#[derive(Debug, Default)]
pub struct Mapped {
    pub spans: Vec<ToolCallSpan>,
    /// Spans that are not tool calls, by why.
    pub skipped: SkippedSpans,
    /// Tool-call spans that could not be read, with why.
    pub rejected: Vec<String>,
}

/// `otlp.servers`: the names of servers that client spans know only by their address (`host`, `host:port`,
/// or a prefix of the request URL in `url.full`), so that one server reached through two addresses is one
/// server. An address with no entry keeps its own name (`host:port`), as listed by health.
#[derive(Debug, Clone, Default)]
pub struct ServerNames(Vec<(String, ServerName)>);

impl ServerNames {
    pub fn new(entries: Vec<(String, ServerName)>) -> Self {
        ServerNames(entries)
    }

    /// The name for a span that names `address` (`host:port` when it has a port, else `host`) and maybe
    /// its URL: the entry for the address with its port, then without, then the longest URL prefix.
    fn name_of(&self, host: &str, address: &str, url: Option<&str>) -> Option<&ServerName> {
        let exact = |key: &str| self.0.iter().find(|(entry, _)| entry == key).map(|(_, name)| name);
        exact(address).or_else(|| exact(host)).or_else(|| {
            let url = url?;
            self.0
                .iter()
                .filter(|(entry, _)| entry.contains("://") && url.starts_with(entry.as_str()))
                .max_by_key(|(entry, _)| entry.len())
                .map(|(_, name)| name)
        })
    }
}

/// Why a span is not a tool call: a bounded set, so that each can be a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// Another MCP method (`tools/list`, `initialize`, `resources/read`, …).
    OtherMcpMethod,
    /// Another GenAI operation (`chat`, `embeddings`, `invoke_agent`, …).
    OtherGenAiOperation,
    /// Neither MCP nor GenAI attributes (an HTTP request, a database query, …).
    NotGenAi,
    /// A GenAI tool call that names no MCP server at all: the agent's own (function) tool.
    NotMcpTool,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::OtherMcpMethod => "other_mcp_method",
            SkipReason::OtherGenAiOperation => "other_gen_ai_operation",
            SkipReason::NotGenAi => "not_gen_ai",
            SkipReason::NotMcpTool => "not_mcp_tool",
        }
    }
}

/// Spans skipped, counted by reason, with the first span name seen for each (for a sampled log line).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SkippedSpans(pub std::collections::BTreeMap<SkipReason, (u64, String)>);

impl SkippedSpans {
    fn add(&mut self, reason: SkipReason, span_name: &str) {
        let entry = self.0.entry(reason).or_insert_with(|| (0, span_name.chars().take(120).collect()));
        entry.0 += 1;
    }

    pub fn total(&self) -> u64 {
        self.0.values().map(|(count, _)| count).sum()
    }
}

fn text(value: &AnyValue) -> Option<String> {
    match value.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        any_value::Value::DoubleValue(d) => Some(d.to_string()),
        any_value::Value::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

fn attributes(list: &[KeyValue]) -> HashMap<&str, String> {
    list.iter().filter_map(|kv| Some((kv.key.as_str(), text(kv.value.as_ref()?)?))).collect()
}

/// A structured attribute value (a map or a list, as the conventions say `gen_ai.tool.call.result` SHOULD
/// be) as JSON; `None` for a scalar, which [`text`] reads.
fn structured(value: &AnyValue) -> Option<serde_json::Value> {
    fn json(value: &AnyValue) -> serde_json::Value {
        use serde_json::Value;
        match value.value.as_ref() {
            None => Value::Null,
            Some(any_value::Value::StringValue(s)) => Value::String(s.clone()),
            Some(any_value::Value::BoolValue(b)) => Value::Bool(*b),
            Some(any_value::Value::IntValue(i)) => Value::from(*i),
            Some(any_value::Value::DoubleValue(d)) => {
                serde_json::Number::from_f64(*d).map_or(Value::Null, Value::Number)
            }
            Some(any_value::Value::BytesValue(bytes)) => Value::String(hex::encode(bytes)),
            Some(any_value::Value::ArrayValue(array)) => {
                Value::Array(array.values.iter().map(json).collect())
            }
            Some(any_value::Value::KvlistValue(list)) => Value::Object(
                list.values
                    .iter()
                    .map(|kv| (kv.key.clone(), kv.value.as_ref().map_or(Value::Null, json)))
                    .collect(),
            ),
            #[allow(unreachable_patterns)]
            Some(_) => Value::Null,
        }
    }
    match value.value.as_ref()? {
        any_value::Value::ArrayValue(_) | any_value::Value::KvlistValue(_) => Some(json(value)),
        _ => None,
    }
}

/// The attribute `key` of `span` as a JSON value: structured as it is, JSON text parsed; other text, when
/// `text_as_string`, a string value.
fn json_attribute(span: &Span, key: &str, text_as_string: bool) -> Result<Option<Box<RawValue>>, String> {
    let Some(value) = span.attributes.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref()) else {
        return Ok(None);
    };
    if let Some(json) = structured(value) {
        return RawValue::from_string(json.to_string()).map(Some).map_err(|e| e.to_string());
    }
    let Some(text) = text(value) else { return Ok(None) };
    match RawValue::from_string(text.clone()) {
        Ok(raw) => Ok(Some(raw)),
        Err(_) if text_as_string => RawValue::from_string(serde_json::Value::String(text).to_string())
            .map(Some)
            .map_err(|e| e.to_string()),
        Err(_) => Ok(None),
    }
}

/// Whether a span is a tool call, or why not.
fn tool_call_or_skip(span: &Span, attrs: &HashMap<&str, String>) -> Result<(), SkipReason> {
    let operation = attrs.get("gen_ai.operation.name");
    let method = attrs.get("mcp.method.name");
    // Docker MCP Gateway: `mcp.tool.call` spans with `mcp.tool.name`, and neither attribute above.
    let gateway = span.name == "mcp.tool.call" && attrs.contains_key("mcp.tool.name");
    if method.is_some_and(|v| v == "tools/call") || gateway {
        return Ok(());
    }
    if operation.is_some_and(|v| v == "execute_tool") {
        // An agent's own tool (a function, a shell) has no MCP server: not ours to watch. An MCP tool names
        // its server somewhere: an `mcp.*` attribute, the server's address, the `mcp__SERVER__` of its name,
        // or, on the server's own span, its kind.
        let mcp = attrs.keys().any(|key| key.starts_with("mcp."))
            || attrs.contains_key("server.address")
            || attrs.get("gen_ai.tool.name").is_some_and(|name| name.starts_with("mcp__"))
            || span.kind == SpanKind::Server as i32;
        return if mcp { Ok(()) } else { Err(SkipReason::NotMcpTool) };
    }
    Err(match (method, operation) {
        (Some(_), _) => SkipReason::OtherMcpMethod,
        (None, Some(_)) => SkipReason::OtherGenAiOperation,
        (None, None) => SkipReason::NotGenAi,
    })
}

fn first<'a>(maps: &[&'a HashMap<&str, String>], keys: &[&str]) -> Option<&'a String> {
    for key in keys {
        for map in maps {
            if let Some(value) = map.get(*key).filter(|v| !v.is_empty()) {
                return Some(value);
            }
        }
    }
    None
}

pub fn map_request(request: &ExportTraceServiceRequest, names: &ServerNames) -> Mapped {
    let mut mapped = Mapped::default();
    for resource_spans in &request.resource_spans {
        let resource = attributes(resource_spans.resource.as_ref().map_or(&[][..], |r| &r.attributes));
        for scope_spans in &resource_spans.scope_spans {
            for span in &scope_spans.spans {
                let attrs = attributes(&span.attributes);
                if let Err(reason) = tool_call_or_skip(span, &attrs) {
                    mapped.skipped.add(reason, &span.name);
                    continue;
                }
                match tool_call(span, &attrs, &resource, names) {
                    Ok(call) => mapped.spans.push(call),
                    Err(reason) => mapped.rejected.push(format!(
                        "span {}: {reason}",
                        hex::encode(span.span_id.get(..32).unwrap_or(&span.span_id))
                    )),
                }
            }
        }
    }
    mapped
}

fn tool_call(
    span: &Span,
    attrs: &HashMap<&str, String>,
    resource: &HashMap<&str, String>,
    names: &ServerNames,
) -> Result<ToolCallSpan, String> {
    let own = [attrs];
    let both = [attrs, resource];
    // Some client spans name the tool only in the span name (`tools/call NAME`, `MCP send tools/call NAME`).
    let named = span
        .name
        .split_once("tools/call ")
        .map(|(_, tool)| tool.trim())
        .filter(|t| !t.is_empty() && !t.contains(' '));
    let declared = first(&own, &["gen_ai.tool.name", "mcp.tool.name"])
        .cloned()
        .or(named.map(str::to_owned))
        .ok_or("no gen_ai.tool.name attribute")?;
    // Claude Code and the Claude Agent SDK name an MCP server's tool `mcp__SERVER__TOOL`.
    let (prefixed_server, tool) = match declared.strip_prefix("mcp__").and_then(|rest| rest.split_once("__"))
    {
        Some((server, tool)) if !server.is_empty() && !tool.is_empty() => {
            (Some(server.to_owned()), tool.to_owned())
        }
        _ => (None, declared),
    };
    // An MCP server's own span (kind SERVER, as the official SDKs emit them) names no server address:
    // the server is the service that emitted it. Its resource names the server, not the calling agent.
    let server_side = span.kind == SpanKind::Server as i32;
    let service = first(&[resource], &["service.name"]).filter(|name| !name.starts_with("unknown_service"));
    let server = match (
        first(&own, &["mcp.server.name"]).or(prefixed_server.as_ref()),
        first(&own, &["server.address"]),
    ) {
        (Some(name), _) => name.clone(),
        (None, Some(host)) if !server_side => {
            let address = match attrs.get("server.port") {
                Some(port) => format!("{host}:{port}"),
                None => host.clone(),
            };
            match names.name_of(host, &address, attrs.get("url.full").map(String::as_str)) {
                Some(name) => name.to_string(),
                None => address,
            }
        }
        _ if server_side => service
            .cloned()
            .ok_or("an MCP server span needs mcp.server.name or the resource service.name of the server")?,
        _ => return Err("no mcp.server.name or server.address attribute".into()),
    };
    let agent_name = if server_side {
        first(&own, &["gen_ai.agent.name", "mcp.client.name"]).cloned()
    } else {
        first(&both, &["gen_ai.agent.name", "service.name"]).cloned()
    };
    let started =
        i64::try_from(span.start_time_unix_nano / 1_000_000).map_err(|_| "start time out of range")?;
    let started_at = Timestamp::from_millis(started).ok_or("start time out of range")?;
    let duration_ms = span.end_time_unix_nano.saturating_sub(span.start_time_unix_nano) as f64 / 1e6;
    // The conventions mark a failed call by `error.type` (`tool_error` for a result with `isError`) and a
    // JSON-RPC error by `rpc.response.status_code`, with or without the span status.
    let status_code = attrs.get("rpc.response.status_code").filter(|code| code.as_str() != "0");
    let failed = span.status.as_ref().is_some_and(|s| s.code == StatusCode::Error as i32)
        || attrs.contains_key("error.type")
        || status_code.is_some();
    let error = failed.then(|| {
        span.status
            .as_ref()
            .map(|s| s.message.clone())
            .filter(|m| !m.is_empty())
            .or_else(|| attrs.get("error.type").cloned())
            .or_else(|| status_code.map(|code| format!("JSON-RPC error {code}")))
            .unwrap_or_default()
    });
    // Text that is not JSON is what the tool returned as text.
    let return_value = json_attribute(span, "gen_ai.tool.call.result", true)?;
    // Arguments are an object; text that is not JSON tells nothing of their shape.
    let arguments = json_attribute(span, "gen_ai.tool.call.arguments", false)?;
    Ok(ToolCallSpan {
        schema_version: driftline_schemas::SCHEMA_VERSION,
        project: None,
        span_id: first(&own, &["gen_ai.tool.call.id"]).cloned().unwrap_or_else(|| hex::encode(&span.span_id)),
        trace_id: (!span.trace_id.is_empty()).then(|| hex::encode(&span.trace_id)),
        session_id: first(&own, &["gen_ai.conversation.id", "mcp.session.id", "session.id"]).cloned(),
        agent_name,
        server: ServerName::parse(server).map_err(|err| err.to_string())?,
        tool: ToolName::parse(tool).map_err(|err| err.to_string())?,
        started_at,
        duration_ms,
        status: if failed { CallStatus::Error } else { CallStatus::Success },
        error,
        return_value,
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Status};

    use super::*;

    pub fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(any_value::Value::StringValue(value.into())) }),
            ..Default::default()
        }
    }

    fn span(attributes: Vec<KeyValue>, status: Option<Status>) -> Span {
        Span {
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            name: "execute_tool search".into(),
            start_time_unix_nano: 1_774_512_942_000_000_000,
            end_time_unix_nano: 1_774_512_942_250_000_000,
            attributes,
            status,
            ..Default::default()
        }
    }

    fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", "planner-service")],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope::default()),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    fn check(attributes: Vec<KeyValue>, status: Option<Status>, expected: Result<serde_json::Value, &str>) {
        let mapped = map_request(&request(vec![span(attributes, status)]), &ServerNames::default());
        match expected {
            Ok(want) => {
                assert!(mapped.rejected.is_empty(), "{:?}", mapped.rejected);
                assert_eq!(serde_json::to_value(&mapped.spans[0]).expect("json"), want);
            }
            Err("skipped") => assert_eq!((mapped.skipped.total(), mapped.spans.len()), (1, 0)),
            Err(reason) => assert!(mapped.rejected[0].ends_with(reason), "{:?}", mapped.rejected),
        }
    }

    #[test]
    fn gen_ai_tool_call() {
        check(
            vec![
                kv("gen_ai.operation.name", "execute_tool"),
                kv("gen_ai.tool.name", "search"),
                kv("gen_ai.tool.call.id", "call-1"),
                kv("gen_ai.agent.name", "planner"),
                kv("gen_ai.conversation.id", "conv-9"),
                kv("mcp.server.name", "search-mcp"),
                kv("gen_ai.tool.call.result", r#"{"results": [{"title": "x"}]}"#),
            ],
            None,
            Ok(
                serde_json::json!({"schema_version": 1, "span_id": "call-1", "trace_id": "01".repeat(16), "session_id": "conv-9",
                "agent_name": "planner", "server": "search-mcp", "tool": "search", "started_at": "2026-03-26T08:15:42.000Z",
                "duration_ms": 250.0, "status": "success", "return_value": {"results": [{"title": "x"}]}}),
            ),
        );
    }

    /// `gen_ai.tool.call.arguments` (opt-in in the conventions) rides along as JSON; text that is not JSON
    /// tells nothing of a shape and is left out.
    #[test]
    fn tool_call_arguments_are_read_when_they_are_json() {
        for (sent, expected) in [
            (
                r#"{"q": "drift", "filters": {"site": "a"}}"#,
                Some(serde_json::json!({"q": "drift", "filters": {"site": "a"}})),
            ),
            ("q=drift", None),
        ] {
            let mut expected_span = serde_json::json!({"schema_version": 1, "span_id": "call-1", "trace_id": "01".repeat(16),
                "agent_name": "planner", "server": "search-mcp", "tool": "search",
                "started_at": "2026-03-26T08:15:42.000Z", "duration_ms": 250.0, "status": "success"});
            if let Some(arguments) = expected {
                expected_span["arguments"] = arguments;
            }
            check(
                vec![
                    kv("gen_ai.operation.name", "execute_tool"),
                    kv("gen_ai.tool.name", "search"),
                    kv("gen_ai.tool.call.id", "call-1"),
                    kv("gen_ai.agent.name", "planner"),
                    kv("mcp.server.name", "search-mcp"),
                    kv("gen_ai.tool.call.arguments", sent),
                ],
                None,
                Ok(expected_span),
            );
        }
    }

    #[test]
    fn mcp_client_span_with_an_error_and_text_result() {
        check(
            vec![
                kv("mcp.method.name", "tools/call"),
                kv("gen_ai.tool.name", "fetch"),
                kv("server.address", "tools.internal"),
                kv("server.port", "8080"),
                kv("mcp.session.id", "s-1"),
                kv("gen_ai.tool.call.result", "not json"),
            ],
            Some(Status { code: StatusCode::Error as i32, message: "upstream timeout".into() }),
            Ok(
                serde_json::json!({"schema_version": 1, "span_id": "02".repeat(8), "trace_id": "01".repeat(16), "session_id": "s-1",
                "agent_name": "planner-service", "server": "tools.internal:8080", "tool": "fetch",
                "started_at": "2026-03-26T08:15:42.000Z", "duration_ms": 250.0, "status": "error", "error": "upstream timeout",
                "return_value": "not json"}),
            ),
        );
    }

    /// The span the official MCP Python SDK (2.x) emits on the server side of a tools/call.
    #[test]
    fn an_mcp_servers_own_span_is_named_by_its_service() {
        let attributes = vec![
            kv("mcp.method.name", "tools/call"),
            kv("mcp.protocol.version", "2025-11-25"),
            kv("jsonrpc.request.id", "7"),
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", "get_forecast"),
        ];
        let mut server_span = span(attributes.clone(), None);
        server_span.kind = SpanKind::Server as i32;
        let mut request = request(vec![server_span.clone()]);
        let mapped = map_request(&request, &ServerNames::default());
        assert!(mapped.rejected.is_empty(), "{:?}", mapped.rejected);
        let call = serde_json::to_value(&mapped.spans[0]).expect("json");
        assert_eq!(
            (call["server"].as_str(), call["tool"].as_str()),
            (Some("planner-service"), Some("get_forecast"))
        );
        assert_eq!(call["agent_name"], serde_json::Value::Null, "the resource is the server, not the agent");
        // A server that kept the SDK's default service name cannot be told apart from others.
        if let Some(resource) = request.resource_spans[0].resource.as_mut() {
            resource.attributes = vec![kv("service.name", "unknown_service:python")];
        }
        let mapped = map_request(&request, &ServerNames::default());
        assert!(
            mapped.rejected[0].ends_with("the resource service.name of the server"),
            "{:?}",
            mapped.rejected
        );
        // The same attributes on a client span still need the server named.
        check(attributes, None, Err("no mcp.server.name or server.address attribute"));
    }

    #[test]
    fn other_spans_are_skipped_and_unreadable_tool_calls_rejected() {
        check(vec![kv("gen_ai.operation.name", "chat")], None, Err("skipped"));
        check(vec![], None, Err("skipped"));
        check(
            vec![kv("gen_ai.operation.name", "execute_tool"), kv("mcp.server.name", "s")],
            None,
            Err("no gen_ai.tool.name attribute"),
        );
        // The span name names the tool when no attribute does (the MCP SDK's client spans).
        let mut named = span(vec![kv("mcp.method.name", "tools/call"), kv("mcp.server.name", "s")], None);
        named.name = "MCP send tools/call get_forecast".into();
        let mapped = map_request(&request(vec![named]), &ServerNames::default());
        assert_eq!(mapped.spans[0].tool, "get_forecast", "{:?}", mapped.rejected);
        // An MCP client span that names no server cannot be counted: rejected, so the emitter hears of it.
        check(
            vec![kv("mcp.method.name", "tools/call"), kv("gen_ai.tool.name", "t")],
            None,
            Err("no mcp.server.name or server.address attribute"),
        );
        // A GenAI tool call with nothing of MCP is the agent's own tool: skipped.
        check(
            vec![kv("gen_ai.operation.name", "execute_tool"), kv("gen_ai.tool.name", "t")],
            None,
            Err("skipped"),
        );
    }

    /// `otlp.servers`: a server known by two addresses, and by a URL prefix, is one server; an address with
    /// no entry keeps its own name.
    #[test]
    fn client_spans_known_by_address_take_the_configured_name() {
        let name = |s: &str| ServerName::parse(s).expect("a name");
        let names = ServerNames::new(vec![
            ("tools.internal:8080".into(), name("search-mcp")),
            ("10.0.0.7".into(), name("search-mcp")),
            ("https://gw.example/mcp/weather".into(), name("weather-mcp")),
            ("https://gw.example/mcp".into(), name("gateway")),
        ]);
        let server = |attributes: Vec<KeyValue>| {
            let mut attributes = attributes;
            attributes.extend([kv("mcp.method.name", "tools/call"), kv("gen_ai.tool.name", "t")]);
            let mapped = map_request(&request(vec![span(attributes, None)]), &names);
            mapped
                .spans
                .first()
                .map(|s| s.server.to_string())
                .unwrap_or_else(|| format!("{:?}", mapped.rejected))
        };
        assert_eq!(
            server(vec![kv("server.address", "tools.internal"), kv("server.port", "8080")]),
            "search-mcp"
        );
        assert_eq!(server(vec![kv("server.address", "10.0.0.7"), kv("server.port", "443")]), "search-mcp");
        assert_eq!(
            server(vec![kv("server.address", "tools.internal"), kv("server.port", "9090")]),
            "tools.internal:9090"
        );
        let url =
            |u: &str| vec![kv("server.address", "gw.example"), kv("server.port", "443"), kv("url.full", u)];
        assert_eq!(server(url("https://gw.example/mcp/weather/v2")), "weather-mcp", "the longest prefix");
        assert_eq!(server(url("https://gw.example/mcp/other")), "gateway");
        assert_eq!(server(url("https://elsewhere.example/mcp")), "gw.example:443");
        // A name the span gives wins over its address.
        assert_eq!(server(vec![kv("mcp.server.name", "own"), kv("server.address", "10.0.0.7")]), "own");
    }

    /// Which reason a skipped span is counted under.
    #[test]
    fn skipped_spans_are_counted_by_reason() {
        let reason = |attributes: Vec<KeyValue>| {
            let mapped = map_request(&request(vec![span(attributes, None)]), &ServerNames::default());
            mapped.skipped.0.keys().map(|r| r.as_str()).collect::<Vec<_>>()
        };
        assert_eq!(reason(vec![kv("mcp.method.name", "tools/list")]), ["other_mcp_method"]);
        assert_eq!(reason(vec![kv("gen_ai.operation.name", "chat")]), ["other_gen_ai_operation"]);
        assert_eq!(reason(vec![kv("http.request.method", "GET")]), ["not_gen_ai"]);
        assert_eq!(
            reason(vec![kv("gen_ai.operation.name", "execute_tool"), kv("gen_ai.tool.name", "Bash")]),
            ["not_mcp_tool"]
        );
        let tools_called = vec![
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", "mcp__github__create_issue"),
        ];
        assert!(reason(tools_called).is_empty(), "an MCP tool by its name");
    }
}
