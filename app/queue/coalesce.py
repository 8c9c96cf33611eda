"""Coalesced writes of running runs: what a run may store a little later rides along.

A streamed answer produces a text delta every few milliseconds, and every model call moves the
state machine twice. Storing each in a transaction of its own costs a commit (a WAL flush) per
chunk. Instead a run *defers* such writes (`LeasedRun.defer`): they are stored, in order and
before anything else, by the run's next fenced write, or, if none comes within `FLUSH_SECONDS`,
by this module's flusher, which stores what every run of the worker (of one `Database`) has
deferred meanwhile in **one** transaction, each run still fenced by its own lease.

What is deferred is never acknowledged to anyone before it is stored: a worker that dies with
deferred writes loses only deltas and state changes of an attempt that is then resumed (the
transcript, tool executions and the run's outcome are never deferred).
"""

from __future__ import annotations

import asyncio
import json
import weakref
from typing import TYPE_CHECKING

import structlog
from sqlalchemy import text

from app.db.engine import APP_ROLE, Database

if TYPE_CHECKING:
    from app.queue.lease import LeasedRun

log = structlog.get_logger(__name__)

FLUSH_SECONDS = 0.05
"""How long a deferred write may wait for a write of its run to ride along with."""

_SET_CLAIMS = text(
    "SELECT set_config('role', :role, true), set_config('request.jwt.claims', :claims, true)"
)


class Flusher:
    """Stores the deferred writes of many runs together, every `interval` seconds at most."""

    def __init__(self, db: Database, interval: float = FLUSH_SECONDS) -> None:
        self.db = db
        self.interval = interval
        self._due: dict[int, LeasedRun] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    def schedule(self, leased: LeasedRun) -> None:
        """`leased` has deferred writes: store them within `interval` seconds."""
        self._due[id(leased)] = leased
        if self._timer is None and self._task is None:
            self._timer = asyncio.get_running_loop().call_later(self.interval, self._start)

    def _start(self) -> None:
        self._timer = None
        self._task = asyncio.create_task(self._flush_due(), name="deferred-writes")

    async def _flush_due(self) -> None:
        try:
            due, self._due = list(self._due.values()), {}
            due = [r for r in due if r.has_deferred()]
            if due:
                await self.flush(due)
        except Exception:
            log.exception("storing deferred writes failed; their runs store them next")
        finally:
            self._task = None
            if self._due:
                self._timer = asyncio.get_running_loop().call_later(self.interval, self._start)

    async def flush(self, runs: list[LeasedRun]) -> None:
        """Store what `runs` deferred, in one transaction. A run busy with a write of its own is
        left to it; a run whose lease was lost has its deferred writes dropped (and learns it at
        its next write)."""
        # Fenced in id order, like every statement that locks several runs (renew_leases):
        # two transactions never wait for each other's run rows in a cycle.
        held = sorted((r for r in runs if not r.write_lock.locked()), key=lambda r: r.run.id)
        for leased in held:
            await leased.write_lock.acquire()  # free: returns without yielding
        try:
            first = held[0].run.principal if held else None
            if first is None:
                return
            async with self.db.tenant(first) as s:
                claims = json.dumps(first.db_claims())
                for leased in held:
                    mine = json.dumps(leased.run.principal.db_claims())
                    if mine != claims:
                        await s.execute(_SET_CLAIMS, {"role": APP_ROLE, "claims": mine})
                        claims = mine
                    await leased.store_deferred(s)
        except BaseException:
            # Left for each run's own next write, which meets the error in the run's context.
            for leased in held:
                leased.restore_deferred()
            raise
        else:
            for leased in held:
                leased.deferred_stored()
        finally:
            for leased in held:
                leased.write_lock.release()


_FLUSHERS: weakref.WeakKeyDictionary[Database, Flusher] = weakref.WeakKeyDictionary()


def flusher_for(db: Database) -> Flusher:
    """The flusher of `db`'s runs (one per database object, i.e. per worker process)."""
    found = _FLUSHERS.get(db)
    if found is None:
        found = _FLUSHERS[db] = Flusher(db)
    return found
