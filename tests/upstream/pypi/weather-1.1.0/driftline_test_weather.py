"""driftline-test-weather 1.1.0: get_forecast now requires `units` (breaking), get_alerts is gone
(breaking), get_air_quality(city) is new. Over stdio."""

from typing import Literal

from mcp.server.mcpserver import MCPServer

server = MCPServer("driftline-test-weather", version="1.1.0")


@server.tool()
def get_forecast(city: str, units: Literal["metric", "imperial"], days: int | None = None) -> str:
    """Weather forecast for a city."""
    return f"{city}: sunny for {days or 1} day(s), {units}"


@server.tool()
def get_air_quality(city: str) -> str:
    """Air quality index for a city."""
    return f"{city}: AQI 42"


def main() -> None:
    server.run("stdio")


if __name__ == "__main__":
    main()
