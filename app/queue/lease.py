"""A claimed run's lease: the fenced transaction every write of a running run goes through, and
the lifecycle verbs that end or suspend the claim (`finish`, `park`, `hand_back`).

A worker that stalls past its lease (GC pause, frozen VM, network partition) may wake up after
another worker took the run over. Each write here starts with `fence_and_allocate`, which
matches (run, lease owner, attempt): a stale worker's write matches nothing and raises
`LeaseLostError` instead of interleaving with the new owner's transcript.

The queue owns the lease, not the rows features write under it: the transcript, tool calls,
compactions, approvals and usage are written by their own modules (`app.runtime.*`), each inside
`LeasedRun.write`, which hands them the open transaction (`FencedWrite`) and appends the events
given to it in the same transaction, after the body (so the body may still fill them in).

Writes that may wait a little (text deltas, state changes: `defer`) are stored by the run's next
`write`, first, or within `coalesce.FLUSH_SECONDS` by the worker's flusher together with other
runs' (`app.queue.coalesce`). A run's writes take turns (`write_lock`), so its event seqs follow
the order in which it stored or deferred them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncSession

from app.core.errors import LeaseLostError
from app.core.events import (
    RunCancelledEvent,
    RunCompletedEvent,
    RunEvent,
    RunFailedEvent,
    RunRequeuedEvent,
)
from app.core.failpoints import CHILD_FINISH_AFTER_COMMIT, CHILD_FINISH_BEFORE_COMMIT, failpoint
from app.db.engine import Database
from app.observability import metrics
from app.queue.coalesce import flusher_for
from app.queue.event_log import insert_events
from app.queue.manager import ClaimedRun
from app.queue.run_audit import run_failed
from app.queue.sql import query


class _CancelFirst(Exception):
    """Rolls back a parking transaction: a cancel was requested."""


@dataclass(slots=True)
class FencedWrite:
    """An open fenced transaction of a claimed run: its session, the run and the worker holding
    it, and whether a cancel was requested."""

    session: AsyncSession
    cancel_requested: bool
    run: ClaimedRun
    worker_id: str
    last_seq: int = 0
    """The last event seq the fence reserved."""


RowWrites = Callable[[FencedWrite], Awaitable[None]]
"""Rows written in a fenced transaction (given its open `FencedWrite`)."""


@dataclass(slots=True)
class _Deferred:
    events: list[RunEvent]
    rows: RowWrites | None
    replaces: str | None


async def _write_rows(w: FencedWrite, deferred: Sequence[_Deferred]) -> None:
    """Run the deferred rows in order, each `replaces` key's last only."""
    last = {d.replaces: i for i, d in enumerate(deferred) if d.replaces is not None}
    for i, d in enumerate(deferred):
        if d.rows is not None and (d.replaces is None or last[d.replaces] == i):
            await d.rows(w)


class LeasedRun:
    """One claimed run, on behalf of its tenant, fenced by its lease."""

    def __init__(self, db: Database, claimed: ClaimedRun, worker_id: str) -> None:
        self.db = db
        self.run = claimed
        self.worker_id = worker_id
        self.write_lock = asyncio.Lock()
        """Held by the transaction writing for this run (its own `write` or the flusher)."""
        self._writer: asyncio.Task[object] | None = None
        self._deferred: list[_Deferred] = []
        self._storing: list[_Deferred] = []
        self._lost = False

    def defer(
        self,
        events: Sequence[RunEvent] = (),
        rows: RowWrites | None = None,
        *,
        replaces: str | None = None,
    ) -> None:
        """Store `events` (and `rows`) with the run's next write, or within the flusher's
        interval (`app.queue.coalesce`), whichever comes first; in the order deferred.

        `replaces`: `rows` overwrite what earlier deferred rows of the same key wrote (e.g. the
        run's `state`): only the last of them runs."""
        if self._lost:
            raise LeaseLostError(f"lease on run {self.run.id} lost")
        self._deferred.append(_Deferred(list(events), rows, replaces))
        flusher_for(self.db).schedule(self)

    def has_deferred(self) -> bool:
        """Whether writes are deferred and not stored yet."""
        return bool(self._deferred)

    async def store_deferred(self, s: AsyncSession) -> None:
        """Store the deferred writes in the open tenant transaction `s` (the flusher's; the
        caller holds `write_lock`). Kept until `deferred_stored` or `restore_deferred`."""
        self._storing, self._deferred = self._deferred, []
        events = [e for deferred in self._storing for e in deferred.events]
        w = await self._fence(s, len(events))
        if w is None:  # its own next write raises LeaseLostError
            self._lost = True
            self._storing = []
            return
        await _write_rows(w, self._storing)
        await self._append(s, events, w.last_seq, len(events))

    def deferred_stored(self) -> None:
        """The transaction that stored the deferred writes committed."""
        self._storing = []

    def restore_deferred(self) -> None:
        """The transaction that stored the deferred writes failed: they are deferred again."""
        self._deferred[:0] = self._storing
        self._storing = []

    @asynccontextmanager
    async def write(self, events: Sequence[RunEvent] = ()) -> AsyncIterator[FencedWrite]:
        """A fenced tenant transaction; `events` are appended in it, after the body succeeds.
        Deferred writes of the run are stored first, in the same transaction.

        The body may add to `events` (a list) when it only learns inside the transaction what
        happened (e.g. how many inbox messages it delivered): their seqs are reserved then, right
        after the ones reserved by the fence (the run row stays locked, so they follow on)."""
        me = asyncio.current_task()
        if self._writer is not None and self._writer is me:
            # A write inside one of this run's writes: a transaction of its own, as it always was.
            async with self._write(events, []) as w:
                yield w
            return
        async with self.write_lock:
            self._writer = me
            pending, self._deferred = self._deferred, []
            try:
                async with self._write(events, pending) as w:
                    yield w
            except BaseException as exc:
                if not isinstance(exc, LeaseLostError):
                    self._deferred[:0] = pending
                raise
            finally:
                self._writer = None
                if self._deferred:  # deferred meanwhile (by a concurrent task of the run)
                    flusher_for(self.db).schedule(self)

    @asynccontextmanager
    async def _write(
        self,
        events: Sequence[RunEvent],
        pending: list[_Deferred],
    ) -> AsyncIterator[FencedWrite]:
        earlier = [e for deferred in pending for e in deferred.events]
        reserved = len(earlier) + len(events)
        async with self.db.tenant(self.run.principal) as s:
            w = await self._fence(s, reserved)
            if w is None:
                self._lost = True
                raise LeaseLostError(f"lease on run {self.run.id} lost")
            await _write_rows(w, pending)
            yield w
            all_events = [*earlier, *events]
            await self._append(s, all_events, w.last_seq, reserved)

    async def _fence(self, s: AsyncSession, n: int) -> FencedWrite | None:
        row = (
            await s.execute(
                query("fence_and_allocate"),
                {
                    "run_id": self.run.id,
                    "session_id": self.run.session_id,
                    "worker_id": self.worker_id,
                    "attempt": self.run.attempt,
                    "n": n,
                },
            )
        ).one_or_none()
        if row is None:
            return None
        return FencedWrite(
            session=s,
            cancel_requested=row.cancel_requested,
            run=self.run,
            worker_id=self.worker_id,
            last_seq=row.last_event_seq,
        )

    async def _append(
        self, s: AsyncSession, events: Sequence[RunEvent], last_seq: int, reserved: int
    ) -> None:
        if len(events) > reserved:
            extra = {"run_id": self.run.id, "n": len(events) - reserved}
            last_seq = (await s.execute(query("allocate_seq"), extra)).one().last_event_seq
        await insert_events(
            s, run_id=self.run.id, tenant_id=self.run.tenant_id, last_seq=last_seq, events=events
        )

    async def emit(self, event: RunEvent) -> bool:
        """Store one event; returns whether a cancel has been requested."""
        async with self.write([event]) as w:
            return w.cancel_requested

    async def park(self, event: RunEvent, rows: Callable[[FencedWrite], Awaitable[None]]) -> bool:
        """Suspend the claim: status `awaiting_approval`, lease cleared, `rows` written (the
        pending approval and the call's state) and `event` stored, atomically.

        Returns False (and changes nothing) when a cancel was requested first: the caller
        finishes the run cancelled instead. The fence locks the run row, so no cancel request
        can slip in between the check and the parking.
        """
        try:
            async with self.write([event]) as w:
                if w.cancel_requested:
                    raise _CancelFirst
                await rows(w)
                parked = await w.session.scalar(
                    query("park_run"),
                    {
                        "run_id": self.run.id,
                        "worker_id": self.worker_id,
                        "attempt": self.run.attempt,
                    },
                )
                if parked is None:
                    raise LeaseLostError(f"lease on run {self.run.id} lost")
        except _CancelFirst:
            return False
        return True

    async def park_waiting(
        self, wake_at: datetime, awaited: Sequence[UUID]
    ) -> Literal["parked", "arrived", "cancel"]:
        """Suspend the claim until one of the `awaited` runs ends, a user's message is steered
        in, or `wake_at` (status `waiting`, lease cleared). `arrived`: such a message is already
        in the inbox, nothing changed (run the waiting call again); `cancel`: a cancel was
        requested first, nothing changed."""
        async with self.write() as w:
            if w.cancel_requested:
                return "cancel"
            parked = await w.session.scalar(
                query("park_waiting"),
                {
                    "run_id": self.run.id,
                    "worker_id": self.worker_id,
                    "attempt": self.run.attempt,
                    "wake_at": wake_at,
                    "awaited": list(awaited),
                },
            )
        return "arrived" if parked is None else "parked"

    async def finish(
        self,
        status: str,
        *,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        closing: Callable[[FencedWrite], Awaitable[list[RunEvent]]] | None = None,
    ) -> None:
        """End the run (completed/failed/cancelled) with its terminal event (and, failed, its
        `run.failed` audit event), atomically.

        `closing` writes a feature's last rows in the same transaction (e.g. results for calls
        cut short); the events it returns are stored before the terminal event."""
        event: RunEvent
        if status == "completed":
            event = RunCompletedEvent(result=result)
        elif status == "failed":
            event = RunFailedEvent.model_validate({"error": error})
        else:
            event = RunCancelledEvent(reason=(error or {}).get("message", "cancelled"))
        events: list[RunEvent] = [event]
        async with self.write(events) as w:
            if closing is not None:
                events[:0] = await closing(w)
            finished = (
                await w.session.execute(
                    query("finish_run"),
                    {
                        "run_id": self.run.id,
                        "worker_id": self.worker_id,
                        "attempt": self.run.attempt,
                        "status": status,
                        "result": None if result is None else json.dumps(result),
                        "error": None if error is None else json.dumps(error),
                    },
                )
            ).one_or_none()
            if finished is None:
                raise LeaseLostError(f"lease on run {self.run.id} lost")
            if status == "failed":
                await run_failed(w.session, self.run.principal, self.run.id, error)
            failpoint(CHILD_FINISH_BEFORE_COMMIT)
        failpoint(CHILD_FINISH_AFTER_COMMIT)
        metrics.observe_run_finished(status, finished.duration_seconds)

    async def hand_back(self) -> None:
        """Return the run to the head of its lane (graceful shutdown) with a `run.requeued` event."""
        async with self.write([RunRequeuedEvent(attempt=self.run.attempt)]) as w:
            await w.session.execute(
                query("release_runs"), {"worker_id": self.worker_id, "run_ids": [self.run.id]}
            )
