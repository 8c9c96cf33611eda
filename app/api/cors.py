"""Cross-origin access for web frontends (Starlette's CORSMiddleware), from CORS_* settings.

No configured origin means no CORS headers at all: browsers then refuse cross-origin calls, and a
preflight is an ordinary 405. Origins are matched exactly (`CORS_ORIGINS`); `CORS_ALLOW_LOCALHOST`
(what `serve` sets on the embedded database) adds any port of `http://localhost` and
`http://127.0.0.1`, so a local frontend dev server works without configuration.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import Message, Send

from app.api.errors import error_body
from app.config import Settings

LOCALHOST_ORIGIN_REGEX = r"http://(localhost|127\.0\.0\.1)(:[0-9]{1,5})?"
"""Matched against the whole `Origin` (Starlette uses `fullmatch`)."""

ALLOW_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
ALLOW_HEADERS = [
    "Authorization",
    "Content-Type",
    "Accept",
    "Cache-Control",  # EventSource polyfills send `Cache-Control: no-cache`
    "Last-Event-ID",  # resuming a stream
    "Idempotency-Key",
    # MCP clients at `/mcp` (app/api/mcp): the protocol version and the 2026-07-28 routing headers
    "Mcp-Protocol-Version",
    "Mcp-Method",
    "Mcp-Name",
    "Mcp-Session-Id",
]
EXPOSE_HEADERS = [
    "Retry-After",
    "Location",
    "Last-Event-ID",
    "WWW-Authenticate",
    "x-vercel-ai-ui-message-stream",  # the AI SDK's UI message stream marker
    "Idempotent-Replayed",  # a retried request got the first request's answer
]
MAX_AGE_SECONDS = 600


class StrictCORSMiddleware(CORSMiddleware):
    """Starlette's CORS middleware, except that a request from an origin that is not allowed gets
    no CORS header at all (Starlette adds the credentials and expose headers to any response
    that has an `Origin`), and a refused preflight is answered in the app's error shape."""

    def preflight_response(self, request_headers: Headers) -> Response:
        """A refused preflight: 400 `cors_refused`, without CORS headers if the origin is not
        allowed (the browser then reports the CORS failure)."""
        response = super().preflight_response(request_headers)
        if response.status_code < 400:
            return response
        origin_allowed = self.is_allowed_origin(request_headers["origin"])
        headers = {
            k: v
            for k, v in response.headers.items()
            if origin_allowed and k != "content-length" and k != "content-type"
        }
        reason = bytes(response.body).decode().removeprefix("Disallowed CORS ")
        return JSONResponse(
            error_body("cors_refused", f"CORS preflight refused: {reason} not allowed"),
            status_code=response.status_code,
            headers=headers,
        )

    async def send(self, message: Message, send: Send, request_headers: Headers) -> None:
        """Add CORS headers to the response only for an allowed origin."""
        origin = request_headers.get("origin")
        if (
            message["type"] == "http.response.start"
            and origin is not None
            and not self.is_allowed_origin(origin)
        ):
            headers = MutableHeaders(scope=message)
            headers.add_vary_header("Origin")
            await send(message)
            return
        await super().send(message, send, request_headers)


def install_cors(app: FastAPI, settings: Settings) -> None:
    """Add the CORS middleware when any origin may call (call after every other middleware, so
    that it is the outermost one and error responses carry CORS headers too)."""
    if not settings.cors_origins and not settings.cors_allow_localhost:
        return
    app.add_middleware(
        StrictCORSMiddleware,
        allow_origins=settings.cors_origins,
        allow_origin_regex=LOCALHOST_ORIGIN_REGEX if settings.cors_allow_localhost else None,
        allow_methods=ALLOW_METHODS,
        allow_headers=ALLOW_HEADERS,
        expose_headers=EXPOSE_HEADERS,
        allow_credentials=settings.cors_allow_credentials,
        max_age=MAX_AGE_SECONDS,
    )
