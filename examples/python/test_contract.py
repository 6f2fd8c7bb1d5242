"""The official SDK declares a tool's output schema (a pydantic return type) and returns structured content
that meets it; driftline holds the returns to the accepted declaration. A new release that changes the
output is a breaking tool list waiting for review, and its returns already break the accepted contract.

Works with mcp 2.x (pinned in requirements.txt) and mcp 1.x.
"""

import asyncio
import time
import urllib.error

from pydantic import BaseModel

from conftest import get, wait_for
from driftline_capture import DriftlineCapture
from test_capture import MCPServer, connect


class Forecast(BaseModel):
    city: str
    temp_c: float


class ForecastV2(BaseModel):
    city: str
    temp: str


def weather_server(release: int) -> MCPServer:
    server = MCPServer("weather")

    if release == 1:
        @server.tool(description="Forecast for a city.")
        def get_forecast(city: str) -> Forecast:
            return Forecast(city=city, temp_c=21.5)
    else:
        @server.tool(description="Forecast for a city.")
        def get_forecast(city: str) -> ForecastV2:
            return ForecastV2(city=city, temp="21C")

    return server


def contract_of(url: str, done, what: str) -> dict:
    """Polls the tool's contract (404 until the declaration reached the tool) until `done` holds."""
    deadline = time.monotonic() + 10
    while True:
        try:
            body = get(f"{url}/api/tools/weather-mcp/get_forecast/contract")
            if done(body):
                return body
        except urllib.error.HTTPError as err:
            body = f"HTTP {err.code}"
        assert time.monotonic() < deadline, f"waited 10 s for {what}: {body}"
        time.sleep(0.05)


async def agent(url: str, release: int, calls: int, before_calls=None) -> None:
    capture = DriftlineCapture(url, server="weather-mcp", agent="travel-bot")
    async with connect(weather_server(release), raw_session=False) as session:
        await capture.tool_list(session)
        if before_calls:
            before_calls()
        for _ in range(calls):
            await capture.call_tool(session, "get_forecast", {"city": "Melbourne"})


def test_returns_are_held_to_the_declared_output_of_the_accepted_release(driftline):
    declared = lambda c: c["contract"] is not None
    asyncio.run(agent(driftline, release=1, calls=12, before_calls=lambda: contract_of(driftline, declared, "the declaration")))
    report = contract_of(driftline, lambda c: c["contract"]["checked"] == 12, "12 checked calls")
    contract = report["contract"]
    assert contract["declared_schema"]["required"] == ["city", "temp_c"], contract
    assert (contract["state"], contract["mismatched"], report["agrees"]) == ("agrees", 0, True), report

    # Release 2 renames the field: its tool list is a BREAKING change that waits for review, so the
    # accepted declaration still holds, and the new returns break it.
    asyncio.run(agent(driftline, release=2, calls=24))
    report = contract_of(driftline, lambda c: c["contract"]["checked"] == 36, "36 checked calls")
    contract = report["contract"]
    assert (contract["state"], contract["mismatched"]) == ("mismatch", 24), report
    [group] = report["signal_groups"]
    assert group["kind"] == "declared_output_mismatch" and group["occurrences"] == 1, group
    assert [f'{r["path"]}: {r["detail"]}' for r in group["reasons"]] == [
        "temp_c: required by the declared schema, missing"
    ], group
    server = get(f"{driftline}/api/health/servers/weather-mcp")
    assert server["status"] == "DEGRADED" and server["contract_mismatches"] == ["get_forecast"], server
    history = wait_for(f"{driftline}/api/health/servers/weather-mcp/drift-history", lambda h: len(h) == 1, "the drift")
    assert history[0]["status"] == "open" and history[0]["max_classification"] == "BREAKING", history
