"""An MCP server on the official Python SDK (MCPServer, formerly FastMCP) whose tools the tests control.

    catalog_server.py [--transport stdio|sse|streamable-http] [--port N] --state DIR

Read at start from DIR: `version` ("1", or "2": `search` then requires `region`); `fail` present → exit 3
at once (a server that cannot start); `hang` present → never answer (a server that does not respond).
Written at start: `pid`. One line goes to stderr so tests can see
it in driftline's log.
"""

import argparse
import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", default="stdio", choices=["stdio", "sse", "streamable-http"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--state", required=True, type=Path)
    args = parser.parse_args()

    if (args.state / "fail").exists():
        print("catalog server refuses to start: the fail file exists", file=sys.stderr, flush=True)
        sys.exit(3)
    version_file = args.state / "version"
    version = version_file.read_text().strip() if version_file.exists() else "1"
    (args.state / "pid").write_text(str(os.getpid()))
    if (args.state / "hang").exists():
        time.sleep(3600)
    print(f"catalog server starting with tools v{version}", file=sys.stderr, flush=True)

    server = MCPServer("catalog")

    if version == "1":

        @server.tool()
        def search(q: str, region: str = "eu") -> str:
            """Search the catalog."""
            return f"{q} in {region}"

    else:

        @server.tool()
        def search(q: str, region: str) -> str:
            """Search the catalog."""
            return f"{q} in {region}"

    @server.tool()
    def get_page(url: str) -> str:
        """Fetch one catalog page."""
        return url

    if args.transport == "stdio":
        server.run()
    else:
        server.run(args.transport, host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
