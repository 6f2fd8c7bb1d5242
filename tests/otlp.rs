//! OTLP/HTTP trace ingest end to end: protobuf (as an OTLP exporter sends it, gzip-compressed) and JSON.

mod support;

use std::io::Write;

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{status, ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use support::{temp_dir, Server};

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(any_value::Value::StringValue(value.into())) }),
        ..Default::default()
    }
}

/// A trace of an agent run: one LLM span (not a tool call) and `n` tool calls of `search` on search-mcp,
/// the last `drifted` of which return a different shape; plus one tool call without a server.
fn export(trace: u8, n: usize, drifted: usize, now_ns: u64) -> ExportTraceServiceRequest {
    let mut spans = vec![Span {
        trace_id: vec![trace; 16],
        span_id: vec![1; 8],
        name: "chat gpt".into(),
        start_time_unix_nano: now_ns,
        end_time_unix_nano: now_ns + 1_000_000,
        attributes: vec![kv("gen_ai.operation.name", "chat")],
        ..Default::default()
    }];
    for i in 0..n {
        let result = if i >= n - drifted {
            r#"{"hits": "none"}"#
        } else {
            r#"{"hits": [{"title": "t", "url": "u"}]}"#
        };
        spans.push(Span {
            trace_id: vec![trace; 16],
            span_id: (i as u64 + 10).to_be_bytes().to_vec(),
            name: "execute_tool search".into(),
            start_time_unix_nano: now_ns,
            end_time_unix_nano: now_ns + 42_000_000,
            attributes: vec![
                kv("gen_ai.operation.name", "execute_tool"),
                kv("gen_ai.tool.name", "search"),
                kv("gen_ai.tool.call.id", &format!("call-{i}")),
                kv("gen_ai.conversation.id", &format!("conv-{}", i % 3)),
                kv("mcp.server.name", "search-mcp"),
                kv("gen_ai.tool.call.result", result),
            ],
            status: (i == 0).then(|| Status { code: status::StatusCode::Ok as i32, message: String::new() }),
            ..Default::default()
        });
    }
    spans.push(Span {
        span_id: vec![9; 8],
        attributes: vec![kv("mcp.method.name", "tools/call"), kv("gen_ai.tool.name", "orphan")],
        start_time_unix_nano: now_ns,
        end_time_unix_nano: now_ns,
        ..Default::default()
    });
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "research-agent")],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans { spans, ..Default::default() }],
            ..Default::default()
        }],
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

#[test]
fn protobuf_and_json_traces_become_tool_calls() {
    let dir = temp_dir("otlp");
    let server = Server::start(&dir, None, &[]);
    let client = server.client(None);

    // Protobuf, gzip-compressed, as an OTLP/HTTP exporter sends it.
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(&export(7, 12, 2, now_ns()).encode_to_vec()).expect("gzip");
    let body = gzip.finish().expect("gzip");
    let (status, answer) = client.send_with(
        "POST",
        "/v1/traces",
        &body,
        &[("Content-Type", "application/x-protobuf"), ("Content-Encoding", "gzip")],
    );
    assert_eq!(status, 200, "{answer}");
    let bytes: Vec<u8> = serde_json::from_value(answer).expect("protobuf bytes");
    let response = ExportTraceServiceResponse::decode(bytes.as_slice()).expect("an OTLP response");
    let partial = response.partial_success.expect("one tool call was rejected");
    assert_eq!(partial.rejected_spans, 1);
    assert!(
        partial.error_message.contains("no mcp.server.name or server.address attribute"),
        "{}",
        partial.error_message
    );

    client.wait_for("/api/tools", "12 tool calls", |tools| tools[0]["calls"] == 12);
    let shape = client.get("/api/tools/search-mcp/search/shape").1;
    assert_eq!(shape["signal_groups"][0]["occurrences"], 2, "{shape}");
    assert_eq!(shape["signal_groups"][0]["reasons"][0]["path"], "hits");
    let impact = client.get("/api/health/servers/search-mcp/drift-impact?tool_name=search").1;
    assert_eq!(impact["consumers"][0]["agent_name"], "research-agent");
    assert_eq!(impact["consumers"][0]["session_count"], 3);
    assert_eq!(impact["consumers"][0]["avg_latency_ms"], 42.0);

    // OTLP JSON (hex ids, string nanoseconds), as the spec writes it.
    let json_body = serde_json::to_vec(&export(8, 3, 0, now_ns())).expect("json");
    let text = String::from_utf8(json_body.clone()).expect("utf-8");
    assert!(text.contains("\"startTimeUnixNano\":\""), "OTLP JSON writes nanoseconds as strings: {text}");
    let (status, answer) =
        client.send_with("POST", "/v1/traces", &json_body, &[("Content-Type", "application/json")]);
    assert_eq!(status, 200);
    assert_eq!(answer["partialSuccess"]["rejectedSpans"], 1, "{answer}");
    client.wait_for("/api/tools", "15 tool calls", |tools| tools[0]["calls"] == 15);

    // Errors: wrong media type, bad protobuf, bad gzip.
    let (status, answer) = client.send_with("POST", "/v1/traces", b"{}", &[("Content-Type", "text/plain")]);
    assert_eq!(status, 415, "{answer}");
    let (status, answer) = client.send_with(
        "POST",
        "/v1/traces",
        b"\xff\xff\xff",
        &[("Content-Type", "application/x-protobuf")],
    );
    assert_eq!((status, answer["error"].as_str().map(|e| e.starts_with("not an OTLP"))), (400, Some(true)));
    let (status, _) = client.send_with(
        "POST",
        "/v1/traces",
        b"nope",
        &[("Content-Type", "application/json"), ("Content-Encoding", "gzip")],
    );
    assert_eq!(status, 400);
    let metrics = client.get("/metrics").1;
    let metrics = metrics.as_str().unwrap_or_default();
    assert!(metrics.contains("driftline_ingest_otlp_spans_total{result=\"skipped\"} 2"), "{metrics}");
    assert!(metrics.contains("driftline_ingest_otlp_spans_total{result=\"tool_call\"} 15"), "{metrics}");
}

/// The tool calls an MCP server's own SDK reports (span kind SERVER, named by the resource's service),
/// compressed with zlib `deflate` as the OpenTelemetry SDKs offer it; the server, seen only in traces, is
/// listed as UNKNOWN. Encodings other than gzip and deflate are refused.
#[test]
fn deflate_and_server_side_spans_of_a_server_seen_only_in_traces() {
    use opentelemetry_proto::tonic::trace::v1::span::SpanKind;

    let dir = temp_dir("otlp-server-side");
    let server = Server::start(&dir, None, &[]);
    let client = server.client(None);
    let now = now_ns();
    let spans: Vec<Span> = (0..4u64)
        .map(|i| Span {
            trace_id: vec![9; 16],
            span_id: (i + 100).to_be_bytes().to_vec(),
            name: "tools/call get_forecast".into(),
            kind: SpanKind::Server as i32,
            start_time_unix_nano: now,
            end_time_unix_nano: now + 5_000_000,
            attributes: vec![
                kv("mcp.method.name", "tools/call"),
                kv("mcp.protocol.version", "2025-11-25"),
                kv("jsonrpc.request.id", &i.to_string()),
                kv("gen_ai.operation.name", "execute_tool"),
                kv("gen_ai.tool.name", "get_forecast"),
            ],
            status: (i == 3)
                .then(|| Status { code: status::StatusCode::Error as i32, message: String::new() }),
            ..Default::default()
        })
        .collect();
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "weather-mcp")],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans { spans, ..Default::default() }],
            ..Default::default()
        }],
    };
    let mut deflate = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    deflate.write_all(&request.encode_to_vec()).expect("deflate");
    let body = deflate.finish().expect("deflate");
    let (status, answer) = client.send_with(
        "POST",
        "/v1/traces",
        &body,
        &[("Content-Type", "application/x-protobuf"), ("Content-Encoding", "Deflate")],
    );
    assert_eq!(status, 200, "{answer}");
    client.wait_for("/api/tools", "the server's own tool calls", |tools| tools[0]["calls"] == 4);
    // An exporter retrying the same export (after a timeout) is counted once.
    let (status, _) = client.send_with(
        "POST",
        "/v1/traces",
        &body,
        &[("Content-Type", "application/x-protobuf"), ("Content-Encoding", "deflate")],
    );
    assert_eq!(status, 200);
    let marker = serde_json::json!([support::span("after-retry", "marker", serde_json::json!(1))]);
    assert_eq!(client.post_json("/v1/spans", &marker).0, 202);
    let tools = client.wait_for("/api/tools", "the marker after the retried export", |tools| {
        tools.as_array().is_some_and(|t| t.len() == 2)
    });
    let forecast =
        tools.as_array().and_then(|t| t.iter().find(|t| t["tool"] == "get_forecast")).expect("tool");
    assert_eq!(
        (forecast["server"].as_str(), forecast["calls"].as_u64()),
        (Some("weather-mcp"), Some(4)),
        "{tools}"
    );
    assert_eq!(forecast["errors"], 1, "{tools}");
    let servers = client.get("/api/health/servers").1;
    let weather = servers.as_array().and_then(|s| s.iter().find(|s| s["server_name"] == "weather-mcp"));
    assert_eq!(weather.map(|s| s["status"].clone()), Some(serde_json::json!("UNKNOWN")), "{servers}");
    let (status, one) = client.get("/api/health/servers/weather-mcp");
    assert_eq!((status, one["status"].as_str()), (200, Some("UNKNOWN")), "{one}");
    // Once its tool list arrives the server is UP like any other.
    assert_eq!(
        client.put_json("/api/servers/weather-mcp/tools", &serde_json::json!([{"name": "get_forecast"}])).0,
        202
    );
    client.wait_for("/api/health/servers/weather-mcp", "the server UP", |s| s["status"] == "UP");

    for encoding in ["br", "gzip, deflate", "compress"] {
        let (status, answer) = client.send_with(
            "POST",
            "/v1/traces",
            &body,
            &[("Content-Type", "application/x-protobuf"), ("Content-Encoding", encoding)],
        );
        assert_eq!(status, 415, "{encoding}: {answer}");
        assert!(answer["error"].as_str().is_some_and(|e| e.contains("send gzip, deflate")), "{answer}");
    }
    let (status, _) = client.send_with(
        "POST",
        "/v1/traces",
        b"not deflate",
        &[("Content-Type", "application/x-protobuf"), ("Content-Encoding", "deflate")],
    );
    assert_eq!(status, 400);
}

/// OTLP spans meet the same checks and limits as /v1/spans: names, ids, durations, the batch size; and the
/// answer quotes a bad value instead of echoing it.
#[test]
fn otlp_spans_pass_the_same_checks_as_span_batches() {
    let dir = temp_dir("otlp-parity");
    let server = Server::start(&dir, None, &[]);
    let client = server.client(None);
    let post = |request: &ExportTraceServiceRequest| {
        client.send_with(
            "POST",
            "/v1/traces",
            &request.encode_to_vec(),
            &[("Content-Type", "application/x-protobuf")],
        )
    };
    let tool_span = |span_id: Vec<u8>, tool: &str, server: &str, duration_ns: u64| Span {
        trace_id: vec![7; 16],
        span_id,
        name: format!("execute_tool {tool}"),
        start_time_unix_nano: now_ns(),
        end_time_unix_nano: now_ns() + duration_ns,
        attributes: vec![
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", tool),
            kv("mcp.server.name", server),
        ],
        ..Default::default()
    };
    let request = |spans: Vec<Span>| ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans { spans, ..Default::default() }],
            ..Default::default()
        }],
    };
    let huge = "t".repeat(1 << 20);
    let (status, answer) = post(&request(vec![
        tool_span(vec![1; 8], &huge, "srv", 1_000_000),
        tool_span(vec![2; 8], "ok", "..", 1_000_000),
        tool_span(vec![3; 8], "ok", "srv", 2 * 86_400_000_000_000),
        tool_span(vec![4; 8], "fine", "srv", 1_000_000),
    ]));
    assert_eq!(status, 200, "{answer}");
    let response = ExportTraceServiceResponse::decode(
        answer
            .as_array()
            .map(|b| b.iter().filter_map(|v| v.as_u64()).map(|v| v as u8).collect::<Vec<u8>>())
            .unwrap_or_default()
            .as_slice(),
    )
    .expect("an OTLP response");
    let partial = response.partial_success.expect("partial success");
    assert_eq!(partial.rejected_spans, 3, "{partial:?}");
    assert!(
        partial.error_message.len() < 2_000,
        "the answer quotes, it does not echo: {} bytes",
        partial.error_message.len()
    );
    for reason in ["invalid tool name", "invalid server name", "duration_ms must be"] {
        assert!(partial.error_message.contains(reason), "{reason}: {}", partial.error_message);
    }
    support::wait_until(10, "the one good span", || {
        let tools = client.get("/api/tools").1;
        (tools.as_array().map(Vec::len) == Some(1) && tools[0]["tool"] == "fine")
            .then_some(())
            .ok_or(tools.to_string())
    });
    // More tool calls than a span batch may hold: refused whole.
    let many: Vec<Span> =
        (0..1001u64).map(|i| tool_span(i.to_be_bytes().to_vec(), "bulk", "srv", 1)).collect();
    let (status, answer) = post(&request(many));
    assert_eq!(status, 413, "{answer}");
    assert!(answer["error"].as_str().is_some_and(|e| e.contains("at most 1000")), "{answer}");
    // Content types and encodings are case-insensitive.
    let (status, answer) = client.send_with(
        "POST",
        "/v1/traces",
        &request(vec![]).encode_to_vec(),
        &[("Content-Type", "Application/X-Protobuf")],
    );
    assert_eq!(status, 200, "{answer}");
}
