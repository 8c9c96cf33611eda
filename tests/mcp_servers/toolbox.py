"""A small MCP server for the client tests: echo, add, a failing tool, a slow one that notes its
cancellation, and one that adds a tool and announces the list change.

Run over stdio with `python toolbox.py [marker-file]`: the slow tool then writes `cancelled` to
the marker file when its call is cancelled (the test process cannot see the server's memory).
Imported, `build_toolbox(events)` returns the server and appends what happened to `events`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations


def build_toolbox(events: list[str], marker: Path | None = None) -> MCPServer:
    """The server; `events` (and `marker`, when given) record slow calls' fates."""
    server = MCPServer("toolbox")

    def note(event: str) -> None:
        events.append(event)
        if marker is not None:
            with marker.open("a") as f:
                f.write(event + "\n")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    @server.tool()
    def add(a: int, b: int) -> dict[str, Any]:
        """Add two integers."""
        return {"sum": a + b}

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    def explode(message: str) -> str:
        """Always fails with `message`."""
        raise ToolError(message)

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, noting whether the call was cancelled."""
        note("slow started")
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            note("slow cancelled")
            raise
        note("slow finished")
        return "done"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool `late` and announce the list change."""

        def late() -> str:
            """A tool that appeared later."""
            return "late"

        server.add_tool(late, name="late")
        await ctx.notify_tools_changed()
        return "grown"

    return server


if __name__ == "__main__":
    marker_path = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    build_toolbox([], marker_path).run("stdio")
