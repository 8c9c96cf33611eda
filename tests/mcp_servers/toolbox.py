"""A small MCP server for the client tests: echo, add, a failing tool, a slow one that notes its
cancellation, one that adds a tool and announces the list change, `history` (what happened, so
a test can see a stdio server's side), `header` (an HTTP request header it received), `exists`
(whether a path is visible: the sandbox test), `env` (a variable's value) and `crash` (the process exits: stdio only).

Run over stdio with `python toolbox.py`; imported, `build_toolbox(events)` returns the server and
appends what happened to `events`.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations


def build_toolbox(events: list[str]) -> MCPServer:
    """The server; `events` records slow calls' fates."""
    server = MCPServer("toolbox", log_level="WARNING")
    note = events.append

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

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def history() -> list[str]:
        """What happened to slow calls so far."""
        return list(events)

    @server.tool()
    def header(name: str, ctx: Context) -> str:
        """The value of request header `name` (HTTP only; empty when absent)."""
        request = ctx.request_context.request
        return "" if request is None else str(request.headers.get(name, ""))

    @server.tool()
    def exists(path: str) -> dict[str, Any]:
        """Whether `path` exists here, and the uid this server runs as."""
        return {"exists": os.path.exists(path), "uid": os.getuid()}

    @server.tool()
    def env(name: str) -> str:
        """The value of environment variable `name` here ("" when unset)."""
        return os.environ.get(name, "")

    @server.tool()
    def crash() -> str:
        """Exit the process at once (a stdio server dying)."""
        os._exit(3)

    return server


if __name__ == "__main__":
    build_toolbox([]).run("stdio")
