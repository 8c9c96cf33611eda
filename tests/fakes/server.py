"""A scripted HTTP/1.1 server on 127.0.0.1 for driving the real provider SDKs in tests.

Each request is recorded (`FakeServer.requests`) and answered by the next scripted reply:

* `JsonReply(status, body, headers)`: an ordinary response;
* `StreamReply(chunks, ...)`: a chunked (`Transfer-Encoding: chunked`) response such as an SSE
  stream, written chunk by chunk (`delay` seconds apart); `cut=True` then drops the connection
  without ending the body (a stream broken mid-way); `hang=True` then waits until the client goes
  away (`FakeServer.disconnected` is set when it does).

Every response says `Connection: close`, so each request has its own connection.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Recorded:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    at: float

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


@dataclass(frozen=True)
class JsonReply:
    """A complete JSON response."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamReply:
    """A chunked response written piece by piece."""

    chunks: list[bytes]
    status: int = 200
    content_type: str = "text/event-stream"
    delay: float = 0.0
    cut: bool = False
    hang: bool = False


Reply = JsonReply | StreamReply

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found"}


class FakeServer:
    """The server; `script()` queues replies, `url` is its base URL once started."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.replies: deque[Reply] = deque()
        self.disconnected = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._port = 0
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>`."""
        assert self._port, "the server has not been started"
        return f"http://127.0.0.1:{self._port}"

    def script(self, *replies: Reply) -> None:
        """Answer the next requests with `replies`, in order."""
        self.replies.extend(replies)

    async def start(self) -> None:
        """Listen on a random local port."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self._port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and end open connections."""
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            request = await _read_request(reader)
            self.requests.append(request)
            reply = (
                self.replies.popleft() if self.replies else JsonReply(500, {"error": "unscripted"})
            )
            if isinstance(reply, JsonReply):
                await _write_json(writer, reply)
            else:
                await self._write_stream(reader, writer, reply)
        except (ConnectionError, asyncio.IncompleteReadError):
            self.disconnected.set()
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _write_stream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reply: StreamReply
    ) -> None:
        head = (
            f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}\r\n"
            f"Content-Type: {reply.content_type}\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode())
        await writer.drain()
        for i, chunk in enumerate(reply.chunks):
            if i and reply.delay:
                await asyncio.sleep(reply.delay)
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
        if reply.cut:
            writer.transport.abort()
            return
        if reply.hang:
            await reader.read()  # returns b"" once the client has closed the connection
            self.disconnected.set()
            return
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def _read_request(reader: asyncio.StreamReader) -> Recorded:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    request_line, *header_lines = head.split("\r\n")
    method, target, _ = request_line.split(" ", 2)
    headers = {}
    for line in header_lines:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    url = urlsplit(target)
    return Recorded(method, url.path, parse_qs(url.query), headers, body, time.monotonic())


async def _write_json(writer: asyncio.StreamWriter, reply: JsonReply) -> None:
    body = json.dumps(reply.body).encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
    head = (
        f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}"
        "Connection: close\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()


def sse(events: list[Any], *, done: bool = False) -> list[bytes]:
    """`data: <json>` SSE events, one chunk each (and `data: [DONE]` last when `done`)."""
    chunks = [f"data: {json.dumps(e)}\r\n\r\n".encode() for e in events]
    return [*chunks, b"data: [DONE]\r\n\r\n"] if done else chunks
