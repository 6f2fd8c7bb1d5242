"""An MCP server on the official Python SDK (MCPServer, formerly FastMCP) whose tools the tests control.

    catalog_server.py [--transport stdio|sse|streamable-http] [--port N] --state DIR

Read at start from DIR: `version` ("1", or "2": `search` then requires `region`); `fail` present → exit 3
at once (a server that cannot start); `hang` present → never answer (a server that does not respond);
`surfaces` present → the server also declares instructions, a prompt and a resource; `watch` present →
the server reads `version` again every 0.2 s and, when it changed, swaps `search` and tells its
`subscriptions/listen` streams (2026-07-28) and every earlier-revision session that listed its tools
(`notifications/tools/list_changed`, 2025-11-25) that its tools changed; `modern-only`
present → only MCP 2026-07-28 is served (`server/discover`, per-request `_meta`): a client opening with the
`initialize` handshake of earlier revisions finds the connection closed; `legacy-only` present → only the
revisions before 2026-07-28 are served (every connection is an `initialize` one).
Written at start: `pid`. One line goes to stderr so tests can see
it in driftline's log.
"""

import argparse
import os
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from mcp.server import runner
from mcp.server.mcpserver import MCPServer
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.subscriptions import ToolsListChanged


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

    surfaces = (args.state / "surfaces").exists()
    if (args.state / "modern-only").exists():

        async def refuse_legacy(*_args, **_kwargs) -> None:
            print("catalog server serves 2026-07-28 only: initialize refused", file=sys.stderr, flush=True)

        runner._serve_legacy_stream = refuse_legacy
    if (args.state / "legacy-only").exists():
        runner._has_modern_envelope = lambda _params: False
    instructions = "Search the catalog before fetching a page." if surfaces else None
    bus = InMemorySubscriptionBus()

    def read_version() -> str:
        return version_file.read_text().strip() if version_file.exists() else "1"

    def define_search(version: str) -> None:
        if version == "1":

            def search(q: str, region: str = "eu") -> str:
                """Search the catalog."""
                return f"{q} in {region}"

        else:

            def search(q: str, region: str) -> str:
                """Search the catalog."""
                return f"{q} in {region}"

        server.add_tool(search)

    @asynccontextmanager
    async def watch_version(_app):
        async with anyio.create_task_group() as tasks:

            async def watch() -> None:
                current = version
                while True:
                    await anyio.sleep(0.2)
                    now = read_version()
                    if now != current:
                        current = now
                        server.remove_tool("search")
                        define_search(now)
                        print(f"catalog server now serves tools v{now}", file=sys.stderr, flush=True)
                        await bus.publish(ToolsListChanged())
                        for session in list(listed):
                            try:
                                await session.send_tool_list_changed()
                            except Exception:  # a session that closed since
                                listed.discard(session)

            tasks.start_soon(watch)
            yield {}
            tasks.cancel_scope.cancel()

    # Earlier-revision sessions that listed the tools: told of a change on their own connection.
    listed: set = set()

    class CatalogServer(MCPServer):
        async def _handle_list_tools(self, ctx, params):
            if not ctx.protocol_version.startswith("2026"):
                listed.add(ctx.session)
            return await super()._handle_list_tools(ctx, params)

    watching = (args.state / "watch").exists()
    server = CatalogServer(
        "catalog", instructions=instructions, subscriptions=bus, lifespan=watch_version if watching else None
    )
    define_search(version)

    if surfaces:

        @server.prompt()
        def review(page: str) -> str:
            """Review one catalog page."""
            return f"Review {page}."

        @server.resource("catalog://about", mime_type="text/plain")
        def about() -> str:
            """What the catalog holds."""
            return "books"

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
