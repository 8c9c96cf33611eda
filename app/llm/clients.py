"""SDK clients shared per event loop, so runs reuse HTTP connections.

`execute_run` may build a `ModelRegistry` per run; the provider clients behind it are kept here,
one per (event loop, configuration), and built on first use inside a running loop (an SDK's
HTTP connection pool belongs to the loop it was created on). The clients of loops that have
closed are dropped the next time a client is asked for; `SharedClient.forget` drops a
configuration's clients at once (a tenant's, when its keys change).

A streamed model call holds its HTTP connection for the whole answer, so a client's connection
pool (`connection_limits`) is sized by the worker's concurrency: the SDKs' defaults (httpx: 100
connections, 20 kept alive; openai: 1,000 and 100) would make the 101st concurrent stream wait
for a connection, or reconnect (TCP and TLS handshakes) on most calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

import httpx

from app.config import Settings

T = TypeVar("T")

SIDE_CONNECTIONS = 32
"""Connections beyond one per concurrent run (embeddings, the API process's own calls)."""

_CLIENTS: dict[asyncio.AbstractEventLoop, dict[Hashable, Any]] = {}


class SharedClient(Generic[T]):
    """A client built by `build` once per running event loop and `key` (its configuration).

    `key` holds whatever distinguishes one configuration from another (endpoint, key, timeout);
    it stays in memory only.
    """

    def __init__(self, key: Hashable, build: Callable[[], T]) -> None:
        self._key = key
        self._build = build

    def get(self) -> T:
        """The client for the running event loop (built now if this loop has none yet)."""
        loop = asyncio.get_running_loop()
        if loop not in _CLIENTS:
            for closed in [other for other in _CLIENTS if other.is_closed()]:
                del _CLIENTS[closed]
        per_loop = _CLIENTS.setdefault(loop, {})
        client = per_loop.get(self._key)
        if client is None:
            client = per_loop[self._key] = self._build()
        return client

    def forget(self) -> None:
        """Drop this configuration's clients in every loop (runs holding one keep it)."""
        for per_loop in _CLIENTS.values():
            per_loop.pop(self._key, None)


def connection_limits(settings: Settings) -> httpx.Limits:
    """The connection pool of a provider's shared client: a stream per run the worker may hold
    at once, all of them kept alive between calls, plus `SIDE_CONNECTIONS`."""
    streams = settings.worker_concurrency
    return httpx.Limits(
        max_connections=streams + SIDE_CONNECTIONS,
        max_keepalive_connections=streams + SIDE_CONNECTIONS,
    )
