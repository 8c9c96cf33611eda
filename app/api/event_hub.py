"""Wake-ups for SSE streams: one LISTEN connection per API process, fanned out per run.

The `agent_runtime_events` trigger sends `"<run_id>:<seq>"` for each stored event. A stream
subscribes to its run and, between reads of `run_events`, waits for a wake-up or a fallback
poll timeout. Notifications are only hints — streams always re-read from their last sent seq —
so a lost notification (or a listener that is down) costs at most one poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from uuid import UUID

import structlog

from app.db.listen import Listener

log = structlog.get_logger(__name__)

EVENTS_CHANNEL = "agent_runtime_events"


class Subscription:
    """One stream's interest in one run: a resettable wake-up flag."""

    def __init__(self, run_id: UUID) -> None:
        self.run_id = run_id
        self._event = asyncio.Event()

    def wake(self) -> None:
        """Signal that the run may have new events."""
        self._event.set()

    async def wait(self, seconds: float) -> bool:
        """Wait up to `seconds` for a wake-up (True: woken, False: timed out); then re-arm."""
        try:
            async with asyncio.timeout(seconds):
                await self._event.wait()
            return True
        except TimeoutError:
            return False
        finally:
            self._event.clear()


class EventHub:
    """Shares one `Listener` among every SSE stream of this process."""

    def __init__(
        self, database_url: str, *, poll_seconds: float = 1.0, retry_seconds: float = 2.0
    ) -> None:
        self.poll_seconds = poll_seconds
        self._retry_seconds = retry_seconds
        self._subscribers: dict[UUID, set[Subscription]] = {}
        self._listener = Listener(database_url, {EVENTS_CHANNEL: self._on_notify})
        self._listener.on_reconnect = self.wake_all
        self._retry: asyncio.Task[None] | None = None
        self.listening = False

    async def start(self) -> None:
        """Start listening. If the database is unreachable, keep retrying in the background
        (streams poll meanwhile) rather than failing the API's startup."""
        try:
            await self._listener.start()
        except Exception as exc:
            log.warning("event listener unavailable; streams will poll", error=str(exc))
            self._retry = asyncio.create_task(self._keep_trying(), name="event-hub-retry")
        else:
            self.listening = True

    async def stop(self) -> None:
        """Stop listening and wake every stream (they will notice the shutdown or poll)."""
        if self._retry is not None:
            self._retry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retry
            self._retry = None
        # A listener whose first connection failed re-raises that error here: nothing to close.
        with contextlib.suppress(Exception):
            await self._listener.stop()
        self.listening = False
        self.wake_all()

    async def _keep_trying(self) -> None:
        while True:
            await asyncio.sleep(self._retry_seconds)
            try:
                await self._listener.start()
            except Exception as exc:
                log.debug("event listener still unavailable", error=str(exc))
                continue
            log.info("event listener connected")
            self.listening = True
            self.wake_all()
            return

    @contextlib.contextmanager
    def subscribe(self, run_id: UUID) -> Iterator[Subscription]:
        """Register for wake-ups about `run_id` for the duration of the `with` block."""
        sub = Subscription(run_id)
        self._subscribers.setdefault(run_id, set()).add(sub)
        try:
            yield sub
        finally:
            subs = self._subscribers.get(run_id)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subscribers[run_id]

    def subscriber_count(self, run_id: UUID | None = None) -> int:
        """How many streams are subscribed (to `run_id`, or to anything)."""
        if run_id is not None:
            return len(self._subscribers.get(run_id, ()))
        return sum(len(s) for s in self._subscribers.values())

    def wake_all(self) -> None:
        """Wake every stream (after a reconnect, notifications may have been missed)."""
        for subs in self._subscribers.values():
            for sub in subs:
                sub.wake()

    def _on_notify(self, payload: str) -> None:
        run_part, _, _seq = payload.partition(":")
        try:
            run_id = UUID(run_part)
        except ValueError:
            log.warning("unexpected event notification", payload=payload)
            return
        for sub in self._subscribers.get(run_id, ()):
            sub.wake()
