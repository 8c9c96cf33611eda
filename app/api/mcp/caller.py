"""Who calls a tool: the verified principal and the app's runtime, found from the tool's context.

`McpEndpoint` authenticates each HTTP request and leaves a `Caller` in its ASGI scope; the SDK
attaches that request (a Starlette `Request`) to every message it serves, so a tool reads the
caller back from `ctx.request_context.request.scope`. A tool never runs without one: a request
that fails auth never reaches the MCP server.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp.server.mcpserver import Context
from starlette.requests import Request

from app.api.deps import Runtime
from app.auth.principal import Principal

SCOPE_KEY = "agent_runtime.mcp_caller"
"""The ASGI scope key under which `McpEndpoint` leaves the verified `Caller`."""


@dataclass(frozen=True, slots=True)
class Caller:
    """The verified principal of an MCP request and the runtime its tools use."""

    principal: Principal
    runtime: Runtime


def caller_of(ctx: Context) -> Caller:
    """The `Caller` of the request `ctx` serves (RuntimeError if the request was not
    authenticated by `McpEndpoint`: a wiring bug, never the caller's fault)."""
    request = ctx.request_context.request
    caller = request.scope.get(SCOPE_KEY) if isinstance(request, Request) else None
    if not isinstance(caller, Caller):
        raise RuntimeError("MCP request without an authenticated caller")
    return caller
