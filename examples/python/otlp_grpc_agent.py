"""A stand-in agent that makes MCP tool calls and traces them with OpenTelemetry, exporting over OTLP/gRPC.

Run it under `opentelemetry-instrument` (the distro's defaults: OTLP over gRPC; the endpoint and headers from
OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_HEADERS), or with --endpoint to set up the SDK's gRPC exporter
itself. tests/distributed.rs runs both against driftline's split ingest stage.
"""

import argparse

from opentelemetry import trace


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", help="set up the SDK's OTLP/gRPC exporter to this endpoint itself")
    parser.add_argument("--key", help="API key, sent as `authorization: Bearer KEY` metadata (with --endpoint)")
    parser.add_argument("--agent", default="sdk-agent")
    parser.add_argument("--server", required=True)
    parser.add_argument("--tool", required=True)
    parser.add_argument("--calls", type=int, default=1)
    args = parser.parse_args()
    provider = None
    if args.endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        headers = {"authorization": f"Bearer {args.key}"} if args.key else None
        exporter = OTLPSpanExporter(endpoint=args.endpoint, insecure=True, headers=headers)
        provider = TracerProvider(resource=Resource.create({"service.name": args.agent}))
        provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("agent")
    for call in range(args.calls):
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": args.tool,
            "gen_ai.tool.call.id": f"{args.tool}-{call}",
            "mcp.server.name": args.server,
            "gen_ai.tool.call.result": '{"ok": true}',
        }
        with tracer.start_as_current_span(f"execute_tool {args.tool}", attributes=attributes):
            pass
    if provider is not None:
        provider.shutdown()


if __name__ == "__main__":
    main()
