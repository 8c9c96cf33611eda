"""Reading one HTTP/1.1 request off a raw asyncio stream: the test servers that must see exactly
what a client sent (headers as sent, the body's bytes) use it instead of a framework."""

from __future__ import annotations

import asyncio


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes]:
    """(method, target, headers lower-cased, body) of the next request on `reader`."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    line, *lines = head.split("\r\n")
    method, target, _ = line.split(" ", 2)
    headers = {}
    for item in lines:
        if ":" in item:
            key, value = item.split(":", 1)
            headers[key.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return method, target, headers, body
