"""ASGI middleware: every request gets an id (`X-Request-Id`), echoed on the answer.

The client's `X-Request-Id` is kept when well formed (so a frontend can correlate), else a fresh
one is made. The id is bound to the logs of the request and to `app.core.request_id.REQUEST_ID`,
which the audit trail records.
"""

from __future__ import annotations

import structlog
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.request_id import REQUEST_ID, accept_request_id

HEADER = "x-request-id"


class RequestId:
    """Set the request id for the request's context and answer with it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the request with its id set; add the id to the response headers."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = None
        for name, value in scope.get("headers", ()):
            if name == HEADER.encode():
                given = value.decode("latin-1")
                break
        request_id = accept_request_id(given)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = request_id
            await send(message)

        token = REQUEST_ID.set(request_id)
        try:
            with structlog.contextvars.bound_contextvars(request_id=request_id):
                await self.app(scope, receive, send_with_id)
        finally:
            REQUEST_ID.reset(token)
