"""`/mcp`: the MCP server over streamable HTTP, behind the REST API's bearer auth.

Stateless: every POST is served on its own (no `Mcp-Session-Id`, nothing kept between requests),
so any API replica behind a load balancer can answer any request and a restart loses nothing.
Clients of the 2026-07-28 protocol need nothing else; older clients get their `initialize`
answered and then post each request independently. Server-to-client requests (sampling,
elicitation) are therefore not offered, nor the standalone `GET` stream (405); progress
notifications ride the request's own SSE response. A `run_agent` call is one long POST: closing
it cancels the run (`app.api.mcp.run_agent`).

No DNS-rebinding check on `Host`/`Origin` (the SDK's default for localhost servers): requests
carry a bearer token, which a rebound page does not have, and browsers are governed by the
app's CORS settings like the rest of the API.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from app.api.deps import Runtime
from app.api.errors import error_body
from app.api.mcp.auth import authenticate
from app.api.mcp.caller import SCOPE_KEY, Caller
from app.api.mcp.server import build_server
from app.auth.verifier import TokenVerifier
from app.tenants.members import MemberRegistry

PATH = "/mcp"


class McpEndpoint:
    """The ASGI app at `/mcp`: authenticate, then hand the request to the MCP transport.

    `run()` must be entered by the app's lifespan (inside it, after the runtime exists): it
    starts the SDK's session manager, which serves requests only while it runs.
    """

    def __init__(self, verifier: TokenVerifier, *, version: str, max_body_bytes: int) -> None:
        self.verifier = verifier
        self.server: MCPServer = build_server(version)
        self.max_body_bytes = max_body_bytes
        self._manager: StreamableHTTPSessionManager | None = None

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Serve `/mcp` for the duration of the block (a new session manager each time: the
        SDK's cannot be restarted).

        The manager runs in a task of its own: its anyio task group must be left by the task
        that entered it, and the app's lifespan is not always ended by the task that started
        it (test fixtures, for one)."""
        self.server.streamable_http_app(
            streamable_http_path=PATH,
            stateless_http=True,
            max_request_body_size=self.max_body_bytes,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        manager = self.server.session_manager
        started, stop = asyncio.Event(), asyncio.Event()
        running = False

        async def serve() -> None:
            nonlocal running
            try:
                async with manager.run():
                    running = True
                    started.set()
                    await stop.wait()
            finally:
                started.set()  # also when it could not start

        task = asyncio.create_task(serve(), name="mcp-session-manager")
        await started.wait()
        if not running:
            await task  # raises why it could not start
        self._manager = manager
        try:
            yield
        finally:
            self._manager = None
            stop.set()
            await task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse an unauthenticated request; else serve it as the verified caller."""
        manager, runtime = self._manager, getattr(scope["app"].state, "runtime", None)
        if manager is None or not isinstance(runtime, Runtime):
            raise RuntimeError("/mcp is served only while the app's lifespan runs")
        principal = await authenticate(self.verifier, scope)
        if isinstance(principal, Response):
            await principal(scope, receive, send)
            return
        if scope["method"] == "GET":
            # the standalone stream: nothing would ever be sent on it without sessions
            await _no_standalone_stream(scope, receive, send)
            return
        members = getattr(scope["app"].state, "members", None)
        if isinstance(members, MemberRegistry):
            await members.observe(runtime.db, principal)
        caller = Caller(principal=principal, runtime=runtime)
        await manager.handle_request({**scope, SCOPE_KEY: caller}, receive, send)


async def _no_standalone_stream(scope: Scope, receive: Receive, send: Send) -> None:
    """405 for `GET /mcp` (the spec's answer from a server that offers no standalone stream)."""
    message = "this server offers no standalone SSE stream (it is stateless): POST each request"
    response = JSONResponse(
        error_body("method_not_allowed", message), status_code=405, headers={"Allow": "POST"}
    )
    await response(scope, receive, send)


def install_mcp(
    app: FastAPI, verifier: TokenVerifier, *, version: str, max_body_bytes: int
) -> McpEndpoint:
    """Route `/mcp` (any method; not in the OpenAPI document) to a new `McpEndpoint`; the app's
    lifespan must enter its `run()`."""
    endpoint = McpEndpoint(verifier, version=version, max_body_bytes=max_body_bytes)
    app.router.routes.append(Route(PATH, endpoint, include_in_schema=False))
    return endpoint
