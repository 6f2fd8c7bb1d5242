"""Send what an MCP client sees to driftline: the server's tool list, and one span per tool call.

Use with the official `mcp` Python SDK: a `ClientSession`, or on mcp 2.x also an `mcp.Client`. No driftline
package is needed (standard library HTTP only). Drop this file into your agent and wrap your session:

    capture = DriftlineCapture("http://127.0.0.1:8000", server="search-mcp", agent="planner", record_arguments=True)
    await capture.tool_list(session)                     # after initialize, and whenever tools change
    result = await capture.call_tool(session, "search", {"q": "drift"}, session_id="conv-1")

Tested with mcp 2.3.0 and mcp 1.30.0. The two differ in field names (2.x `next_cursor`, `is_error`,
`structured_content`; 1.x `nextCursor`, `isError`, `structuredContent`), which `_field` reads either way, and in
listing pages (`ClientSession.list_tools(params=...)` on both, `Client.list_tools(cursor=...)` on 2.x).
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from datetime import datetime, timezone
from typing import Any

from mcp import ClientSession
from mcp.types import PaginatedRequestParams


class DriftlineError(RuntimeError):
    """driftline refused the data (the message says why) or could not be reached."""


class DriftlineCapture:
    def __init__(
        self,
        url: str,
        server: str,
        agent: str | None = None,
        api_key: str | None = None,
        timeout: float = 5.0,
        record_arguments: bool = False,
    ):
        """`record_arguments`: send each call's arguments too; driftline keeps only their shape (keys and kinds,
        never a value), to tell which of your real calls a new input schema would reject."""
        self.record_arguments = record_arguments
        self.url = url.rstrip("/")
        self.server = server
        self.agent = agent
        self.api_key = api_key
        self.timeout = timeout

    def _send(self, method: str, path: str, body: Any) -> dict:
        request = urllib.request.Request(
            f"{self.url}{path}", data=json.dumps(body).encode(), method=method, headers={"Content-Type": "application/json"}
        )
        if self.api_key:
            request.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            raise DriftlineError(f"{method} {path}: HTTP {err.code}: {err.read().decode(errors='replace')}") from err
        except OSError as err:
            raise DriftlineError(f"{method} {path}: {err}") from err

    async def tool_list(self, session) -> int:
        """Sends the complete tool list (every page) as one snapshot; returns how many tools it held.

        `session` is a `ClientSession` (mcp 1.x or 2.x) or an mcp 2.x `Client`.
        """
        tools, cursor = [], None
        while True:
            if isinstance(session, ClientSession):
                page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
            else:  # mcp 2.x `Client`
                page = await session.list_tools(cursor=cursor)
            tools.extend(tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in page.tools)
            cursor = _field(page, "next_cursor", "nextCursor")
            if not cursor:
                break
        self._send("PUT", f"/api/servers/{self.server}/tools", {"tools": tools, "source": "sdk"})
        return len(tools)

    async def call_tool(self, session, tool: str, arguments: dict | None = None, session_id: str | None = None):
        """Calls the tool through `session` (as for `tool_list`) and records the call; returns the tool's result.

        driftline reduces the recorded return value to a shape. A result flagged as an error counts as a failed call.
        """
        started = datetime.now(timezone.utc)
        clock = time.perf_counter()
        error, result = None, None
        try:
            result = await session.call_tool(tool, arguments or {})
        except Exception as exc:  # the call failed before returning: still a span, with the error
            error = f"{type(exc).__name__}: {exc}"
        span = {
            "span_id": uuid.uuid4().hex,
            "server": self.server,
            "tool": tool,
            "started_at": started.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "duration_ms": (time.perf_counter() - clock) * 1000,
            "status": "error" if error or (result is not None and _field(result, "is_error", "isError")) else "success",
        }
        if self.agent:
            span["agent_name"] = self.agent
        if session_id:
            span["session_id"] = session_id
        if self.record_arguments:
            span["arguments"] = arguments or {}
        if error:
            span["error"] = error
        elif result is not None:
            value = _return_value(result)
            if value is not _ABSENT:
                span["return_value"] = value
        self._send("POST", "/v1/spans", [span])
        if error:
            raise DriftlineError(error)
        return result


_ABSENT = object()


def _field(model, name: str, v1_name: str) -> Any:
    """A result field by its mcp 2.x name, else by its mcp 1.x (camelCase) name."""
    return getattr(model, name) if hasattr(model, name) else getattr(model, v1_name)


def _return_value(result) -> Any:
    """The value an agent reads: structured content when the tool gives it, else the JSON in its text."""
    structured = _field(result, "structured_content", "structuredContent")
    if structured is not None:
        return structured
    texts = [block.text for block in result.content if getattr(block, "type", None) == "text"]
    if len(texts) != 1:
        return _ABSENT
    try:
        return json.loads(texts[0])
    except ValueError:
        return texts[0]
