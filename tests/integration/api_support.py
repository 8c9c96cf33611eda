"""Helpers for the API tests: a running app with an httpx client, tokens, and a streaming SSE reader.

httpx's ASGITransport buffers whole responses, which cannot show live SSE delivery or client
disconnects; `SSEConnection` drives the ASGI app directly and exposes frames as they are sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI

from app.api.app import create_app
from app.api.deps import Runtime
from app.auth.jwt import mint_token
from app.config import Settings
from app.db.engine import Database

SECRET = "api-test-secret-0123456789abcdef0123456789"
USERS = {"alice": "acme", "mallory": "evil"}  # user -> tenant (matches conftest's principals)
OWNERS = frozenset(USERS)
"""Users who own their tenant in these tests (alice owns acme, mallory evil): their tokens carry
`app_metadata.role = owner` unless a test asks for another role."""


def make_settings(db_url: str | None, **overrides: Any) -> Settings:
    """Explicit test settings (never read from the environment or `.env`)."""
    values: dict[str, Any] = {
        "database_url": db_url,
        "supabase_jwt_secret": SECRET,
        "sse_keepalive_seconds": 5.0,
        **overrides,
    }
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def auth(user: str = "alice", *, tenant: str | None = None, **token_args: Any) -> dict[str, str]:
    """An Authorization header for `user` (tenant from USERS unless given; alice and mallory own
    their tenants unless `role=` says otherwise)."""
    tenant = tenant or USERS.get(user)
    if "role" not in token_args and user in OWNERS and tenant == USERS[user]:
        token_args["role"] = "owner"
    token = mint_token(SECRET, user_id=user, tenant_id=tenant, **token_args)
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Api:
    """A started app, an httpx client over it, and its runtime objects."""

    app: FastAPI
    client: httpx.AsyncClient

    @property
    def runtime(self) -> Runtime:
        runtime = self.app.state.runtime
        assert isinstance(runtime, Runtime)
        return runtime

    async def post_run(self, message: str = "hello", user: str = "alice", **body: Any) -> Any:
        r = await self.client.post(
            "/api/agent-runtime", json={"message": message, **body}, headers=auth(user)
        )
        assert r.status_code == 202, r.text
        return r.json()

    def stream(self, params: dict[str, str], headers: dict[str, str]) -> SSEConnection:
        return SSEConnection(self.app, "/api/agent-runtime/stream", params, headers)

    def stream_get(self, path: str, headers: dict[str, str]) -> SSEConnection:
        """A streaming GET of any path."""
        return SSEConnection(self.app, path, {}, headers)

    def stream_post(self, path: str, body: Any, headers: dict[str, str]) -> SSEConnection:
        """A streaming POST of a JSON body."""
        json_headers = {**headers, "Content-Type": "application/json"}
        return SSEConnection(
            self.app, path, {}, json_headers, method="POST", body=json.dumps(body).encode()
        )


@contextlib.asynccontextmanager
async def running_api(
    settings: Settings, database: Database | None = None, *, raise_app_exceptions: bool = True
) -> AsyncIterator[Api]:
    """Create the app, run its lifespan, and yield it with a client."""
    app = create_app(settings, database=database)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=raise_app_exceptions)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield Api(app=app, client=client)


def error_of(response: httpx.Response) -> dict[str, Any]:
    """The `error` object of a JSON error response (asserting the shared shape)."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert {"code", "message"} <= set(body["error"]), body
    error: dict[str, Any] = body["error"]
    return error


@dataclass
class Frame:
    """One SSE frame: an event (id/event/data) or a comment."""

    id: str | None = None
    event: str | None = None
    data: str | None = None
    comments: list[str] = field(default_factory=list)


def parse_frames(text: str) -> tuple[list[Frame], str]:
    """Complete frames in `text`, and the incomplete rest."""
    text = text.replace("\r\n", "\n")
    *complete, rest = text.split("\n\n")
    frames = []
    for block in complete:
        frame = Frame()
        for line in block.split("\n"):
            if line.startswith(":"):
                frame.comments.append(line[1:].strip())
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "data":
                frame.data = value if frame.data is None else frame.data + "\n" + value
            elif key in ("id", "event"):
                setattr(frame, key, value)
        frames.append(frame)
    return frames, rest


class SSEConnection:
    """A streaming request (GET unless told) against the ASGI app: read frames as they come,
    disconnect at will."""

    def __init__(
        self,
        app: FastAPI,
        path: str,
        params: dict[str, str],
        headers: dict[str, str],
        *,
        method: str = "GET",
        body: bytes = b"",
    ) -> None:
        self._app = app
        self._body = body
        self._scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": urllib.parse.urlencode(params).encode(),
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            "server": ("test", 80),
            "client": ("127.0.0.1", 1234),
        }
        self._messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._disconnect = asyncio.Event()
        self._request_sent = False
        self._buffer = ""
        self._pending: list[Frame] = []
        self.task: asyncio.Task[None] | None = None
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body = b""
        self.ended = False

    async def __aenter__(self) -> SSEConnection:
        self.task = asyncio.create_task(self._app(self._scope, self._receive, self._send))
        start = await asyncio.wait_for(self._messages.get(), 5)
        assert start["type"] == "http.response.start"
        self.status = start["status"]
        self.headers = {k.decode(): v.decode() for k, v in start["headers"]}
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.disconnect()
        assert self.task is not None
        await asyncio.wait_for(self.task, 5)

    async def _receive(self) -> dict[str, Any]:
        if not self._request_sent:
            self._request_sent = True
            return {"type": "http.request", "body": self._body, "more_body": False}
        await self._disconnect.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        await self._messages.put(message)

    def disconnect(self) -> None:
        """The client goes away."""
        self._disconnect.set()

    async def next_frame(self, wait: float = 5) -> Frame | None:
        """The next frame (event or comment), or None once the response has ended."""
        while not self._pending:
            if self.ended:
                return None
            message = await asyncio.wait_for(self._messages.get(), wait)
            chunk = message.get("body", b"")
            self.body += chunk
            frames, self._buffer = parse_frames(self._buffer + chunk.decode())
            self._pending.extend(frames)
            if not message.get("more_body", False):
                self.ended = True
        return self._pending.pop(0)

    async def next_event(self, wait: float = 5) -> Frame | None:
        """The next event frame within `wait` seconds (skipping keep-alive comments), or None
        at the end of the response."""
        async with asyncio.timeout(wait):
            while True:
                frame = await self.next_frame(wait)
                if frame is None or frame.data is not None:
                    return frame

    async def read_to_end(self, wait: float = 5) -> list[Frame]:
        """Every remaining event frame until the server ends the response (within `wait`)."""
        frames = []
        async with asyncio.timeout(wait):
            while (frame := await self.next_event(wait)) is not None:
                frames.append(frame)
        return frames
