"""OTLP over gRPC, as the OpenTelemetry SDKs export by default, reaches driftline.

The official Python SDK's gRPC exporter (`opentelemetry-exporter-otlp-proto-grpc`), and an agent run under
`opentelemetry-instrument` with the distro's defaults (OTLP, gRPC, port 4317 unless told otherwise), send
tool-call spans to `driftline serve`'s OTLP/gRPC listener; each call is counted once. With API keys, a wrong key
is refused UNAUTHENTICATED and the right one in the `authorization` metadata is accepted.
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export import SpanExportResult

from conftest import BIN, get, wait_for

KEY = "grpc-test-key"


def serve(config=""):
    """`driftline serve` with OTLP/gRPC on a free port: (its HTTP URL, its gRPC address, the process)."""
    data = tempfile.mkdtemp(prefix="driftline-grpc-")
    path = os.path.join(data, "driftline.toml")
    with open(path, "w") as file:
        file.write(config)
    process = subprocess.Popen(
        [BIN, "serve", "--bind", "127.0.0.1:0", "--data-dir", data, "--config", path],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "DRIFTLINE__OTLP__GRPC_BIND": "127.0.0.1:0"},
    )
    http = process.stdout.readline().strip()
    assert http.startswith("driftline listening on "), http
    line = process.stdout.readline().strip()
    assert line.startswith("otlp grpc listening on "), line
    return http.removeprefix("driftline listening on "), line.removeprefix("otlp grpc listening on "), process


@pytest.fixture()
def open_server():
    http, address, process = serve()
    yield http, address
    process.terminate()
    process.wait(timeout=20)


def tool_span(tracer, tool, call):
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": call,
        "gen_ai.conversation.id": "conv-1",
        "mcp.server.name": "search-mcp",
        "gen_ai.tool.call.result": '{"hits": [{"title": "t"}]}',
    }
    with tracer.start_as_current_span(f"execute_tool {tool}", attributes=attributes):
        pass


def calls(http):
    return sum(tool["calls"] for tool in get(f"{http}/api/tools"))


def test_the_sdk_grpc_exporter_delivers_each_call_once(open_server):
    http, address = open_server
    exporter = OTLPSpanExporter(endpoint=f"http://{address}", insecure=True)
    provider = TracerProvider(resource=Resource.create({"service.name": "research-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    for i in range(12):
        tool_span(tracer, "search", f"call-{i}")
    with tracer.start_as_current_span("chat gpt", attributes={"gen_ai.operation.name": "chat"}):
        pass
    provider.shutdown()
    wait_for(f"{http}/api/tools", lambda tools: sum(t["calls"] for t in tools) == 12, "12 calls over gRPC")
    impact = get(f"{http}/api/health/servers/search-mcp/drift-impact?tool_name=search")
    assert [c["agent_name"] for c in impact["consumers"]] == ["research-agent"]
    # A call sent again (an exporter's retry: the same call id in the same trace) is counted once: two calls in
    # a new trace, one of them sent twice, make 14, not 15.
    exporter = OTLPSpanExporter(endpoint=f"http://{address}", insecure=True)
    provider = TracerProvider(resource=Resource.create({"service.name": "research-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("agent turn"):
        tool_span(tracer, "search", "call-3")
        tool_span(tracer, "search", "call-3")
        tool_span(tracer, "search", "call-12")
    provider.shutdown()
    wait_for(f"{http}/api/tools", lambda tools: sum(t["calls"] for t in tools) >= 14, "the new calls")
    assert calls(http) == 14
    metrics = get(f"{http}/metrics", parse=lambda b: b.decode())
    assert 'driftline_ingest_otlp_spans_total{result="tool_call"} 15' in metrics, metrics
    assert 'driftline_ingest_otlp_spans_skipped_total{reason="other_gen_ai_operation"} 1' in metrics, metrics


def test_opentelemetry_instrument_with_its_defaults_delivers_tool_calls(open_server):
    http, address = open_server
    agent = textwrap.dedent("""
        from opentelemetry import trace
        tracer = trace.get_tracer("agent")
        for i in range(5):
            with tracer.start_as_current_span("execute_tool fetch", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch",
                    "gen_ai.tool.call.id": f"fetch-{i}", "mcp.server.name": "web-mcp"}):
                pass
    """)
    script = os.path.join(tempfile.mkdtemp(prefix="driftline-agent-"), "agent.py")
    with open(script, "w") as file:
        file.write(agent)
    # The distro's defaults: traces exported over OTLP, gRPC; only the endpoint names this test's port.
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env.update({"OTEL_SERVICE_NAME": "fetcher", "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{address}",
                "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"})
    instrument = os.path.join(os.path.dirname(sys.executable), "opentelemetry-instrument")
    result = subprocess.run([instrument, sys.executable, script], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    wait_for(f"{http}/api/tools", lambda tools: any(t["tool"] == "fetch" and t["calls"] == 5 for t in tools),
             "5 calls from opentelemetry-instrument")
    impact = get(f"{http}/api/health/servers/web-mcp/drift-impact?tool_name=fetch")
    assert [c["agent_name"] for c in impact["consumers"]] == ["fetcher"]


def export_request():
    span = trace_pb2.Span(
        trace_id=bytes(16 * [7]), span_id=bytes(8 * [1]), name="execute_tool search",
        start_time_unix_nano=1_800_000_000_000_000_000, end_time_unix_nano=1_800_000_000_050_000_000,
        attributes=[common_pb2.KeyValue(key=k, value=common_pb2.AnyValue(string_value=v)) for k, v in [
            ("gen_ai.operation.name", "execute_tool"), ("gen_ai.tool.name", "search"),
            ("mcp.server.name", "search-mcp")]])
    return trace_service_pb2.ExportTraceServiceRequest(resource_spans=[trace_pb2.ResourceSpans(
        scope_spans=[trace_pb2.ScopeSpans(spans=[span])])])


def test_a_wrong_key_is_unauthenticated_and_the_right_one_in_the_metadata_is_accepted():
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    config = f'[[auth.keys]]\nproject = "default"\nscopes = ["ingest", "read"]\nsha256 = "{digest}"\n'
    http, address, process = serve(config)
    try:
        with grpc.insecure_channel(address) as channel:
            export = trace_service_pb2_grpc.TraceServiceStub(channel).Export
            for metadata in [None, [("authorization", "Bearer wrong")]]:
                with pytest.raises(grpc.RpcError) as refused:
                    export(export_request(), metadata=metadata, timeout=10)
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, refused.value
                assert "API key" in refused.value.details()
            answer = export(export_request(), metadata=[("authorization", f"Bearer {KEY}")], timeout=10)
            assert not answer.HasField("partial_success") or answer.partial_success.rejected_spans == 0
            # A span that cannot be read is refused by count, naming why.
            bad = export_request()
            bad.resource_spans[0].scope_spans[0].spans[0].attributes[2].value.string_value = ".."
            answer = export(bad, metadata=[("authorization", f"Bearer {KEY}")], timeout=10)
            assert answer.partial_success.rejected_spans == 1
            assert "invalid server name" in answer.partial_success.error_message
        # The SDK exporter with the key in its headers.
        exporter = OTLPSpanExporter(endpoint=f"http://{address}", insecure=True,
                                    headers={"authorization": f"Bearer {KEY}"})
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tool_span(provider.get_tracer("test"), "search", "with-key")
        provider.shutdown()

        def tools():
            request = urllib.request.Request(f"{http}/api/tools", headers={"Authorization": f"Bearer {KEY}"})
            with urllib.request.urlopen(request, timeout=5) as response:
                return json.loads(response.read())
        deadline = time.monotonic() + 10
        while sum(t["calls"] for t in tools()) < 2:
            assert time.monotonic() < deadline, tools()
            time.sleep(0.05)
        assert sum(t["calls"] for t in tools()) == 2
    finally:
        process.terminate()
        process.wait(timeout=20)
