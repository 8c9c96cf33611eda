"""A receiver for the tenant HTTP tools tests: an HTTP/1.1 server on 127.0.0.1 that records each
request, checks its signature the way docs/tools.md tells receivers to, and answers as told."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tests.integration.raw_http import read_request

HOST = "127.0.0.1"
ALLOW_RECEIVER = ["127.0.0.1/32"]


def signature_ok(secret: str, headers: dict[str, str], payload: bytes) -> bool:
    """The receiver's check, as docs/tools.md shows it (written out again here on purpose)."""
    fields = dict(p.split("=", 1) for p in headers.get("x-agent-runtime-signature", "").split(","))
    delivery = headers.get("x-agent-runtime-delivery", "")
    if abs(time.time() - int(fields.get("t", "0"))) > 300:
        return False
    signed = f"{fields['t']}.{delivery}.".encode() + payload
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields.get("v1", ""))


@dataclass
class Received:
    """One request as the receiver saw it."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> str:
        return urlsplit(self.target).query

    def payload(self) -> bytes:
        """What the signature covers: the body, or a GET's raw query string."""
        return self.query.encode() if self.method == "GET" else self.body


@dataclass
class Reply:
    """How the receiver answers a path."""

    body: bytes = b'{"ok": true}'
    status: int = 200
    content_type: str = "application/json"
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Receiver:
    """The server: answers by path (404 otherwise), remembers every request."""

    replies: dict[str, Reply] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    secret: str = ""
    port: int = 0

    def url(self, path: str, host: str = HOST) -> str:
        return f"http://{host}:{self.port}{path}"

    def verified(self, request: Received) -> bool:
        return signature_ok(self.secret, request.headers, request.payload())

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method, target, headers, body = await read_request(reader)
            request = Received(method, target, headers, body)
            self.received.append(request)
            reply = self.replies.get(request.path, Reply(b"no such path", 404, "text/plain"))
            await asyncio.sleep(reply.delay)
            extra = "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
            writer.write(
                f"HTTP/1.1 {reply.status} X\r\nContent-Type: {reply.content_type}\r\n{extra}"
                f"Content-Length: {len(reply.body)}\r\nConnection: close\r\n\r\n".encode()
                + reply.body
            )
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


@contextlib.asynccontextmanager
async def running_receiver(**replies: Reply) -> AsyncIterator[Receiver]:
    """A receiver on 127.0.0.1 (an ephemeral port) answering `/<name>` with `replies[name]`."""
    receiver = Receiver(replies={f"/{k}": v for k, v in replies.items()})
    server = await asyncio.start_server(receiver.serve, HOST, 0)
    receiver.port = server.sockets[0].getsockname()[1]
    try:
        yield receiver
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)


def tool_body(url: str, **fields: Any) -> dict[str, Any]:
    """A PUT body for a tool at `url` (a `q` string argument unless `parameters` is given)."""
    return {
        "description": "Look something up.",
        "parameters": {
            "type": "object",
            "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["q"],
            "additionalProperties": False,
        },
        "url": url,
        "method": "POST",
        "timeoutSeconds": 5,
        "risk": "low",
        **fields,
    }
