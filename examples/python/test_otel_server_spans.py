"""The official MCP Python SDK's own server spans reach driftline over OTLP/HTTP.

mcp 2.x wraps every request an MCP server handles in an OpenTelemetry span of kind SERVER (its
`OpenTelemetryMiddleware` is on by default; it only needs a tracer provider). Here the server exports them with the
real OpenTelemetry SDK's OTLP/HTTP exporter, deflate-compressed, to driftline's `POST /v1/traces` — nothing
driftline-specific in the server — and driftline shows the tool's calls and errors under the server's
`service.name`, and the server as UNKNOWN (seen in traces only, no tool list).
"""

import asyncio

import requests
from mcp import Client
from mcp.server.mcpserver import MCPServer
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from conftest import get, wait_for


def weather_server() -> MCPServer:
    server = MCPServer("weather")

    @server.tool(description="Forecast for a city.")
    def get_forecast(city: str) -> dict:
        if city == "Atlantis":
            raise ValueError("no such city")  # a tool error: the span's status is ERROR, error.type tool_error
        return {"city": city, "temp_c": 21.5}

    return server


async def call_tools(cities):
    async with Client(weather_server()) as client:
        for city in cities:
            result = await client.call_tool("get_forecast", {"city": city})
            assert result.is_error == (city == "Atlantis"), result


def test_mcp_server_spans_reach_driftline_over_otlp(driftline):
    # Every OTLP request as it went on the wire: (HTTP status, Content-Encoding, driftline's answer).
    sent = []
    session = requests.Session()
    session.hooks["response"].append(
        lambda r, *_, **__: sent.append(
            (r.status_code, r.request.headers.get("Content-Encoding"), ExportTraceServiceResponse.FromString(r.content))
        )
    )
    exporter = OTLPSpanExporter(endpoint=f"{driftline}/v1/traces", compression=Compression.Deflate, session=session)
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-mcp"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # the SDK's tracer is global; it can be set once per process
    assert trace.get_tracer_provider() is provider

    asyncio.run(call_tools(["Melbourne", "Oslo", "Lima", "Atlantis"]))
    assert provider.force_flush()
    provider.shutdown()

    assert sent and all(status == 200 and encoding == "deflate" for status, encoding, _ in sent), sent
    rejected = [answer.partial_success for _, _, answer in sent if answer.HasField("partial_success")]
    assert not rejected, f"driftline rejected spans: {rejected}"

    tools = wait_for(
        f"{driftline}/api/tools",
        lambda tools: any(t["tool"] == "get_forecast" and t["calls"] == 4 for t in tools),
        "4 get_forecast calls from the OTLP spans",
    )
    assert [(t["server"], t["tool"], t["calls"], t["errors"]) for t in tools] == [("weather-mcp", "get_forecast", 4, 1)]

    servers = get(f"{driftline}/api/health/servers")
    assert [(s["server_name"], s["status"]) for s in servers] == [("weather-mcp", "UNKNOWN")], servers
    assert get(f"{driftline}/api/health/servers/weather-mcp")["status"] == "UNKNOWN"  # urlopen raises unless 200

    metrics = get(f"{driftline}/metrics", parse=bytes.decode).splitlines()
    assert 'driftline_ingest_otlp_spans_total{result="tool_call"} 4' in metrics, metrics
    assert 'driftline_ingest_otlp_spans_total{result="rejected"} 0' in metrics, metrics
