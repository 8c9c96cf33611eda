"""SDK clients shared per event loop, so runs reuse HTTP connections.

`execute_run` may build a `ModelRegistry` per run; the provider clients behind it are kept here,
one per (event loop, configuration), and built on first use inside a running loop (an SDK's
HTTP connection pool belongs to the loop it was created on). The clients of loops that have
closed are dropped the next time a client is asked for; `SharedClient.forget` drops a
configuration's clients at once (a tenant's, when its keys change).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

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
