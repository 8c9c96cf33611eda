"""ASGI middleware: the METRICS_PORT listener serves `/metrics` and nothing else.

The API serves both its port and METRICS_PORT from one process (two sockets, one app,
`app/cli/server_commands.py`); a request that came in on the metrics socket for any other path
is 404 before it reaches a route, so that port never exposes the API.
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import error_body


class MetricsPortOnly:
    """404 for everything but `GET /metrics` on `port`."""

    def __init__(self, app: ASGIApp, port: int) -> None:
        self.app = app
        self.port = port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, unless it reached the metrics port for another path."""
        server = scope.get("server") or (None, None)
        on_metrics_port = scope["type"] in ("http", "websocket") and server[1] == self.port
        if on_metrics_port and scope["path"] != "/metrics":
            if scope["type"] == "http":
                response = JSONResponse(error_body("not_found", "not found"), status_code=404)
                await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
