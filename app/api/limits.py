"""A request-body size limit that answers in the API's JSON error shape.

(Starlette's own limiter answers a declared oversize body with a plain-text 413.) Routes that
take raw uploads with their own, configurable limit are exempted by `exempt`.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_body


class BodySizeLimit:
    """ASGI middleware: 413 for a request body over `max_bytes` (declared or streamed)."""

    def __init__(
        self, app: ASGIApp, max_bytes: int, exempt: Callable[[Scope], bool] | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Reject early on `Content-Length`; otherwise count bytes as the app reads them."""
        if scope["type"] != "http" or (self.exempt is not None and self.exempt(scope)):
            await self.app(scope, receive, send)
            return
        message = f"request body is larger than {self.max_bytes} bytes"
        if self._declared_length(scope) > self.max_bytes:
            response = JSONResponse(error_body("payload_too_large", message), status_code=413)
            await response(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            msg = await receive()
            if msg["type"] == "http.request":
                received += len(msg.get("body", b""))
                if received > self.max_bytes:
                    # FastAPI re-raises HTTPExceptions from body reading: the JSON handler answers.
                    raise HTTPException(413, message)
            return msg

        await self.app(scope, limited_receive, send)

    @staticmethod
    def _declared_length(scope: Scope) -> int:
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return 0
        return 0
