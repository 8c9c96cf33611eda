"""Live run events for SSE streams: one LISTEN connection and one shared reader per API process.

The `agent_runtime_events` trigger sends `"<run_id>:<seq>"` (per row, or per statement with the
statement's highest seq; a bare `"<run_id>"` is understood too). A stream first catches up on its
run under its own principal (RLS), then goes live (`EventHub.go_live`): from then on the hub
reads the run's new events once per batch of notifications — for every notified run in one
statement (`hub_reader.SharedReader`) — and hands the same event objects to each live stream of
that run. No stream touches the database while the hub serves it, so the cost of an event is one
row read, not one transaction per stream.

Notifications are only hints: the hub also re-reads every live run each `poll_seconds` (one
statement for all of them), and after a listener reconnect. When the hub cannot read for the
streams (no LISTEN connection, a reader error, or a role that cannot bypass RLS), it wakes them
instead and each reads for itself under its own principal, polling every `poll_seconds`, as
streams did before the shared reader existed. Streams resume by seq, so a wake-up never loses
or repeats an event.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from uuid import UUID

import structlog

from app.api.hub_reader import PER_RUN, NotPermittedError, RunRead, SharedReader
from app.core.events import RunEvent
from app.core.state_machine import TERMINAL_STATUSES
from app.db.listen import Listener

log = structlog.get_logger(__name__)

EVENTS_CHANNEL = "agent_runtime_events"
IDLE_SECONDS = 60.0
"""How long a live stream served by the hub waits before reading for itself anyway."""


class Subscription:
    """One stream's interest in one run: events handed over by the hub, and wake-ups that ask
    the stream to read for itself."""

    def __init__(self, run_id: UUID) -> None:
        self.run_id = run_id
        self.live = False
        """Caught up under the stream's own principal: the hub may read the run for it."""
        self.position = 0
        """The last seq the stream had when it went live."""
        self._event = asyncio.Event()
        self._events: list[RunEvent] = []
        self._must_read = False

    def wake(self) -> None:
        """Ask the stream to read the run itself (it may have new events)."""
        self._must_read = True
        self._event.set()

    def deliver(self, events: list[RunEvent]) -> None:
        """Hand over new events (in seq order; the stream skips any it already sent)."""
        self._events.extend(events)
        self._event.set()

    def take(self) -> tuple[list[RunEvent], bool]:
        """The events handed over since the last call, and whether the stream must read itself."""
        events, must_read = self._events, self._must_read
        self._events, self._must_read = [], False
        self._event.clear()
        return events, must_read

    async def wait(self, seconds: float) -> bool:
        """Wait up to `seconds` for events or a wake-up (True) or time out (False)."""
        try:
            async with asyncio.timeout(seconds):
                await self._event.wait()
            return True
        except TimeoutError:
            return False


class EventHub:
    """Shares one `Listener` and one `SharedReader` among every SSE stream of this process."""

    def __init__(
        self, database_url: str, *, poll_seconds: float = 1.0, retry_seconds: float = 2.0
    ) -> None:
        self.poll_seconds = poll_seconds
        self._retry_seconds = retry_seconds
        self._subscribers: dict[UUID, set[Subscription]] = {}
        self._read_seq: dict[UUID, int] = {}
        self._pending: set[UUID] = set()
        self._pending_event = asyncio.Event()
        self._listener = Listener(database_url, {EVENTS_CHANNEL: self._on_notify})
        self._listener.on_reconnect = self._refresh_all
        self._reader = SharedReader(database_url)
        self._reader_ok = False
        self._reader_task: asyncio.Task[None] | None = None
        self._retry: asyncio.Task[None] | None = None
        self.listening = False

    @property
    def shared(self) -> bool:
        """Whether the hub reads for live streams now (else each stream reads for itself)."""
        return self.listening and self._reader_ok

    async def start(self) -> None:
        """Start listening and reading. If the database is unreachable, keep retrying in the
        background (streams poll meanwhile) rather than failing the API's startup."""
        try:
            await self._listener.start()
        except Exception as exc:
            log.warning("event listener unavailable; streams will poll", error=str(exc))
            self._retry = asyncio.create_task(self._keep_trying(), name="event-hub-retry")
        else:
            self.listening = True
        self._reader_task = asyncio.create_task(self._read_loop(), name="event-hub-reader")

    async def stop(self) -> None:
        """Stop listening and reading, and wake every stream (they read and poll for themselves)."""
        for task in (self._retry, self._reader_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._retry = self._reader_task = None
        self._reader.close()
        self._reader_ok = False
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
        """Register for `run_id`'s events for the duration of the `with` block."""
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
                    self._read_seq.pop(run_id, None)

    def go_live(self, sub: Subscription, position: int) -> None:
        """`sub`'s stream has read its run under its own principal up to `position`: from now on
        the hub may read the run's new events for it (at once, in case it missed a notification
        in between)."""
        sub.position = position
        sub.live = True
        self._mark(sub.run_id)

    def subscriber_count(self, run_id: UUID | None = None) -> int:
        """How many streams are subscribed (to `run_id`, or to anything)."""
        if run_id is not None:
            return len(self._subscribers.get(run_id, ()))
        return sum(len(s) for s in self._subscribers.values())

    def wake_all(self) -> None:
        """Make every stream read for itself (e.g. when the hub stops)."""
        for subs in self._subscribers.values():
            for sub in subs:
                sub.wake()

    def _refresh_all(self) -> None:
        """After a reconnect notifications may have been missed: re-read every run."""
        if self.shared:
            for run_id in self._subscribers:
                self._mark(run_id)
        else:
            self.wake_all()

    def _mark(self, run_id: UUID) -> None:
        if self.shared:
            self._pending.add(run_id)
            self._pending_event.set()
        else:
            for sub in self._subscribers.get(run_id, ()):
                sub.wake()

    def _on_notify(self, payload: str) -> None:
        """`"<run_id>"` or `"<run_id>:<seq>"` (the highest seq the notifying statement stored):
        a run the hub has already read up to that seq needs no read."""
        run_part, _, seq_part = payload.partition(":")
        try:
            run_id = UUID(run_part)
            seq = int(seq_part) if seq_part else None
        except ValueError:
            log.warning("unexpected event notification", payload=payload)
            return
        if run_id not in self._subscribers:
            return
        if seq is not None and self.shared and self._read_seq.get(run_id, -1) >= seq:
            return  # already read (and handed out) by an earlier batch
        self._mark(run_id)

    async def _read_loop(self) -> None:
        """Read new events for the notified runs (and, each `poll_seconds`, for all live runs)."""
        polled = time.monotonic()
        while True:
            if not self._reader_ok and not await self._connect_reader():
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_seconds):
                    await self._pending_event.wait()
            self._pending_event.clear()
            if time.monotonic() - polled >= self.poll_seconds:
                polled = time.monotonic()
                self._pending.update(self._subscribers)
            runs, self._pending = self._pending, set()
            positions = {r: p for r in runs if (p := self._position(r)) is not None}
            if not positions or not self.listening:
                continue
            try:
                found = await self._reader.read(positions)
            except Exception as exc:
                log.warning("shared event read failed; streams read for themselves", error=str(exc))
                self._reader_ok = False
                for run_id in positions:
                    for sub in self._subscribers.get(run_id, ()):
                        sub.wake()
                continue
            self._hand_out(positions, found)

    async def _connect_reader(self) -> bool:
        """Connect the shared reader; False when it can never read (the role obeys RLS)."""
        while True:
            try:
                await self._reader.connect()
            except NotPermittedError as exc:
                log.info(str(exc))
                return False
            except Exception as exc:
                log.debug("shared event reader unavailable", error=str(exc))
                await asyncio.sleep(self._retry_seconds)
                continue
            self._reader_ok = True
            self._refresh_all()
            return True

    def _position(self, run_id: UUID) -> int | None:
        """Where the next read of `run_id` starts (None: no live stream wants it)."""
        live = [s.position for s in self._subscribers.get(run_id, ()) if s.live]
        if not live:
            return None
        return self._read_seq.get(run_id, min(live))

    def _hand_out(self, positions: dict[UUID, int], found: dict[UUID, RunRead]) -> None:
        for run_id in positions:
            read = found.get(run_id)
            subs = [s for s in self._subscribers.get(run_id, ()) if s.live]
            if read is None or not subs:
                continue
            events = read.events
            if events:
                assert events[-1].seq is not None  # stored events have their envelope
                self._read_seq[run_id] = events[-1].seq
                for sub in subs:
                    sub.deliver(events)
                if len(events) == PER_RUN:
                    self._mark(run_id)  # more to read
            elif read.status is None or read.status in TERMINAL_STATUSES:
                for sub in subs:
                    sub.wake()  # over (or gone): the stream's own read ends it
            else:
                self._read_seq.setdefault(run_id, positions[run_id])
