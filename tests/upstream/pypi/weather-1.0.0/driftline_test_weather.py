"""driftline-test-weather 1.0.0: get_forecast(city, days?) and get_alerts(state), over stdio."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("driftline-test-weather", version="1.0.0")


@server.tool()
def get_forecast(city: str, days: int | None = None) -> str:
    """Weather forecast for a city."""
    return f"{city}: sunny for {days or 1} day(s)"


@server.tool()
def get_alerts(state: str) -> str:
    """Weather alerts for a US state."""
    return f"{state}: no alerts"


def main() -> None:
    server.run("stdio")


if __name__ == "__main__":
    main()
