"""LISTEN/NOTIFY over one dedicated asyncpg connection, reconnecting when it drops.

Used by workers (`agent_runtime_runs`, `agent_runtime_cancel`) and by the API's SSE hub
(`agent_runtime_events`). Notifications are hints: every consumer also polls, so a dropped
connection delays work by at most one poll interval and never loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import asyncpg
import structlog

from app.db.urls import asyncpg_dsn

log = structlog.get_logger(__name__)

Callback = Callable[[str], None]

# What a dropped or refused connection raises, while connecting or while setting up LISTEN.
_CONNECTION_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


class Listener:
    """Keeps a LISTEN connection open for a fixed set of channels and dispatches payloads."""

    def __init__(self, database_url: str, callbacks: dict[str, Callback]) -> None:
        self._dsn = asyncpg_dsn(database_url)
        self._callbacks = callbacks
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self.on_reconnect: Callable[[], None] | None = None

    async def start(self) -> None:
        """Connect and start listening; returns once the first connection is up."""
        self._task = asyncio.create_task(self._run(), name="pg-listener")
        waiter = asyncio.create_task(self._connected.wait())
        done, _ = await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if self._task in done:
            waiter.cancel()
            self._task.result()  # re-raise the connection error

    async def stop(self) -> None:
        """Close the connection and stop reconnecting."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        first = True
        delay = 0.2
        while True:
            conn: Any = None
            lost = asyncio.Event()
            try:
                conn = await asyncpg.connect(self._dsn)
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                for channel, callback in self._callbacks.items():
                    await conn.add_listener(channel, _dispatch(callback))
            except _CONNECTION_ERRORS as exc:
                if conn is not None:
                    conn.terminate()
                if first:
                    raise
                log.warning(
                    "listener reconnect failed",
                    error_type=type(exc).__name__,
                    error=str(exc).split("\n", 1)[0][:200],
                    retry_in=delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            try:
                self._connected.set()
                if not first and self.on_reconnect is not None:
                    self.on_reconnect()  # notifications may have been missed: consumers re-poll
                first = False
                delay = 0.2
                while not lost.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), timeout=10)
                    if not lost.is_set() and conn.is_closed():
                        break
                log.warning("listener connection lost; reconnecting")
            finally:
                with contextlib.suppress(Exception):
                    await conn.close(timeout=2)


def _dispatch(callback: Callback) -> Callable[[Any, int, str, str], None]:
    def handler(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            callback(payload)
        except Exception:  # a consumer's bug must not kill the shared connection
            log.exception("notification callback failed")

    return handler
