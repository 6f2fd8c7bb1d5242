//! OTLP/HTTP trace ingest (`POST /v1/traces`): tool-call spans of any OpenTelemetry-instrumented agent,
//! mapped to ToolCallSpan by the GenAI and MCP semantic conventions. Spans that are not tool calls are
//! counted and skipped; tool calls that cannot be read are rejected by count (OTLP partial success).
//!
//! The mapping, in one place (README "OTLP" has the same table):
//!
//! | ToolCallSpan | taken from (first present) |
//! |---|---|
//! | is a tool call | `gen_ai.operation.name = execute_tool`, or `mcp.method.name = tools/call` |
//! | tool | `gen_ai.tool.name`, `mcp.tool.name`, else the span name's `tools/call NAME` |
//! | server | `mcp.server.name`, `server.address` (with `:server.port` when set); on an MCP server's own span (kind SERVER) `mcp.server.name`, else the resource `service.name` |
//! | span_id | `gen_ai.tool.call.id`, else the span id (hex) |
//! | trace_id | the trace id (hex) |
//! | session_id | `gen_ai.conversation.id`, `mcp.session.id`, `session.id` |
//! | agent_name | `gen_ai.agent.name`, else resource `service.name`; on a server span `gen_ai.agent.name`, `mcp.client.name` (else unknown) |
//! | started_at, duration_ms | start and end time of the span |
//! | status, error | span status ERROR → `error` with the status message or `error.type`; otherwise `success` |
//! | return_value | `gen_ai.tool.call.result` (JSON text is parsed; other text is a string value) |
//! | arguments | `gen_ai.tool.call.arguments` (opt-in in the conventions; JSON text only: its shape is kept, never the values) |

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
    /// Spans that are not tool calls.
    pub skipped: u64,
    /// Tool-call spans that could not be read, with why.
    pub rejected: Vec<String>,
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

pub fn map_request(request: &ExportTraceServiceRequest) -> Mapped {
    let mut mapped = Mapped::default();
    for resource_spans in &request.resource_spans {
        let resource = attributes(resource_spans.resource.as_ref().map_or(&[][..], |r| &r.attributes));
        for scope_spans in &resource_spans.scope_spans {
            for span in &scope_spans.spans {
                let attrs = attributes(&span.attributes);
                let is_tool_call = attrs.get("gen_ai.operation.name").is_some_and(|v| v == "execute_tool")
                    || attrs.get("mcp.method.name").is_some_and(|v| v == "tools/call");
                if !is_tool_call {
                    mapped.skipped += 1;
                    continue;
                }
                match tool_call(span, &attrs, &resource) {
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
) -> Result<ToolCallSpan, String> {
    let own = [attrs];
    let both = [attrs, resource];
    // Some client spans name the tool only in the span name (`tools/call NAME`, `MCP send tools/call NAME`).
    let named = span
        .name
        .split_once("tools/call ")
        .map(|(_, tool)| tool.trim())
        .filter(|t| !t.is_empty() && !t.contains(' '));
    let tool = first(&own, &["gen_ai.tool.name", "mcp.tool.name"])
        .cloned()
        .or(named.map(str::to_owned))
        .ok_or("no gen_ai.tool.name attribute")?;
    // An MCP server's own span (kind SERVER, as the official SDKs emit them) names no server address:
    // the server is the service that emitted it. Its resource names the server, not the calling agent.
    let server_side = span.kind == SpanKind::Server as i32;
    let service = first(&[resource], &["service.name"]).filter(|name| !name.starts_with("unknown_service"));
    let server = match (first(&own, &["mcp.server.name"]), first(&own, &["server.address"])) {
        (Some(name), _) => name.clone(),
        (None, Some(address)) if !server_side => match attrs.get("server.port") {
            Some(port) => format!("{address}:{port}"),
            None => address.clone(),
        },
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
    let failed = span.status.as_ref().is_some_and(|s| s.code == StatusCode::Error as i32);
    let error = failed.then(|| {
        span.status
            .as_ref()
            .map(|s| s.message.clone())
            .filter(|m| !m.is_empty())
            .or_else(|| attrs.get("error.type").cloned())
            .unwrap_or_default()
    });
    let return_value = match attrs.get("gen_ai.tool.call.result") {
        None => None,
        Some(result) => Some(match RawValue::from_string(result.clone()) {
            Ok(raw) => raw,
            // Not JSON: the tool returned text.
            Err(_) => RawValue::from_string(serde_json::Value::String(result.clone()).to_string())
                .map_err(|e| e.to_string())?,
        }),
    };
    // Arguments are an object sent as JSON text; text that is not JSON tells nothing of their shape.
    let arguments =
        attrs.get("gen_ai.tool.call.arguments").and_then(|text| RawValue::from_string(text.clone()).ok());
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
        let mapped = map_request(&request(vec![span(attributes, status)]));
        match expected {
            Ok(want) => {
                assert!(mapped.rejected.is_empty(), "{:?}", mapped.rejected);
                assert_eq!(serde_json::to_value(&mapped.spans[0]).expect("json"), want);
            }
            Err("skipped") => assert_eq!((mapped.skipped, mapped.spans.len()), (1, 0)),
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
        let mapped = map_request(&request);
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
        let mapped = map_request(&request);
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
        let mapped = map_request(&request(vec![named]));
        assert_eq!(mapped.spans[0].tool, "get_forecast", "{:?}", mapped.rejected);
        check(
            vec![kv("gen_ai.operation.name", "execute_tool"), kv("gen_ai.tool.name", "t")],
            None,
            Err("no mcp.server.name or server.address attribute"),
        );
    }
}
