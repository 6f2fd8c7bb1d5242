"""Runs the capture snippet against `driftline serve` with a real MCP server (MCPServer / FastMCP, in memory).

Works with mcp 2.x (pinned in requirements.txt) and mcp 1.x.
"""

import asyncio
from contextlib import asynccontextmanager

try:  # mcp 2.x: FastMCP is now MCPServer, and `Client` connects to it in process
    from mcp import Client
    from mcp.server.mcpserver import MCPServer
except ImportError:  # mcp 1.x
    Client = None
    from mcp.server.fastmcp import FastMCP as MCPServer
    from mcp.shared.memory import create_connected_server_and_client_session

from conftest import get, wait_for
from driftline_capture import DriftlineCapture

def weather_server(shape_changed: bool) -> MCPServer:
    server = MCPServer("weather")

    @server.tool(description="Forecast for a city.")
    def get_forecast(city: str, days: int = 1) -> dict:
        if city == "Atlantis":
            raise ValueError("no such city")  # the client gets a result flagged as an error
        return {"city": city, "temp": "warm"} if shape_changed else {"city": city, "temp_c": 21.5}

    @server.tool(description="Weather alerts for a region.")
    def get_alerts(region: str) -> dict:
        return {"alerts": []}

    return server


@asynccontextmanager
async def connect(server, raw_session: bool):
    """mcp 1.x: a `ClientSession`. mcp 2.x: a `Client`, or with `raw_session` the `ClientSession` inside it."""
    if Client is None:
        async with create_connected_server_and_client_session(server) as session:
            yield session
    else:
        async with Client(server) as client:
            yield client.session if raw_session else client


async def run_agent(
    url: str, calls: int, shape_changed: bool, raw_session: bool = False, failing: int = 0, record_arguments: bool = False
) -> int:
    capture = DriftlineCapture(url, server="weather-mcp", agent="travel-bot", record_arguments=record_arguments)
    async with connect(weather_server(shape_changed), raw_session) as session:
        count = await capture.tool_list(session)
        for i in range(calls):
            await capture.call_tool(session, "get_forecast", {"city": "Melbourne"}, session_id=f"trip-{i % 2}")
        for _ in range(failing):
            result = await capture.call_tool(session, "get_forecast", {"city": "Atlantis"}, session_id="trip-0")
            assert getattr(result, "is_error", None) or getattr(result, "isError", None), result
    return count


def test_tool_list_and_spans_reach_driftline(driftline):
    assert asyncio.run(run_agent(driftline, calls=10, shape_changed=False, failing=1, record_arguments=True)) == 2
    servers = wait_for(f"{driftline}/api/health/servers", lambda s: s and s[0]["status"] == "UP", "the tool list")
    assert servers[0]["server_name"] == "weather-mcp" and servers[0]["tool_count"] == 2
    tools = get(f"{driftline}/api/servers/weather-mcp/tools")
    assert sorted(t["tool_name"] for t in tools) == ["get_alerts", "get_forecast"]
    forecast = next(t for t in tools if t["tool_name"] == "get_forecast")
    assert forecast["input_schema"]["required"] == ["city"]

    # The tool starts returning a different shape: driftline flags it.
    asyncio.run(run_agent(driftline, calls=2, shape_changed=True, raw_session=True))
    shape = wait_for(
        f"{driftline}/api/tools/weather-mcp/get_forecast/shape",
        lambda s: s["signal_groups"] and s["signal_groups"][0]["occurrences"] == 2,
        "the shape drift",
    )
    reasons = [r["path"] for r in shape["signal_groups"][0]["reasons"]]
    assert reasons == ["temp_c", "temp"]
    impact = get(f"{driftline}/api/health/servers/weather-mcp/drift-impact?tool_name=get_forecast")
    assert impact["consumers"][0]["agent_name"] == "travel-bot"
    assert impact["consumers"][0]["call_count"] == 13
    assert impact["consumers"][0]["error_count"] == 1
    assert impact["total_sessions"] == 2
    # The first run recorded its arguments (a city, as the input schema asks), the second did not.
    assert impact["consumers"][0]["arguments"] == {
        "rejected_calls": 0, "accepted_calls": 11, "unknown_calls": 2, "reasons": []}
