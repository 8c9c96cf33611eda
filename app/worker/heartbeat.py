"""The lease heartbeat, on its own thread with its own event loop and connection.

Renewing leases from the worker's main event loop would let a busy loop (a slow tool, a CPU-bound
step, a long synchronous call) starve the heartbeat until the lease expired and another worker
re-ran the same tool calls. Here the heartbeat has its own thread, loop and connection pool, so it
keeps beating whatever the main loop is doing. The same thread recovers other workers' expired
leases (and gives up on runs whose lease expired `max_run_attempts` times: `worker_crashed`),
expires overdue tool approvals (requeuing their parked runs, so that the loop feeds the denial
back), fails idle sub-agent runs past their deadline, cancels the children a parent's cancel
missed (`app.queue.sweeps`) and reports cancel requests and lost leases back to the main loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from uuid import UUID

import structlog

from app.db.engine import Database
from app.observability import metrics
from app.queue.manager import RunQueue
from app.queue.sweeps import cancel_orphans, fail_overdue
from app.tools.approval_store import sweep_expired_approvals

log = structlog.get_logger(__name__)


class Heartbeat(threading.Thread):
    """Renews this worker's leases every `interval` seconds and recovers expired ones."""

    def __init__(
        self,
        *,
        database_url: str,
        worker_id: str,
        lease_seconds: float,
        interval: float,
        max_run_attempts: int,
        held_runs: Callable[[], list[UUID]],
        on_cancel: Callable[[UUID], None],
        on_lost: Callable[[UUID], None],
    ) -> None:
        super().__init__(name=f"heartbeat-{worker_id}", daemon=True)
        self._url = database_url
        self._worker_id = worker_id
        self._lease_seconds = lease_seconds
        self._interval = interval
        self._max_run_attempts = max_run_attempts
        self._held_runs = held_runs
        self._on_cancel = on_cancel
        self._on_lost = on_lost
        self._halt = threading.Event()
        self.beats = 0

    def stop(self) -> None:
        """Ask the thread to exit after its current beat."""
        self._halt.set()

    def run(self) -> None:
        """Thread body: an event loop of its own running `_beat` until stopped."""
        asyncio.run(self._main())

    async def _main(self) -> None:
        db = Database(self._url, pool_size=1, max_overflow=1)
        queue = RunQueue(db, max_run_attempts=self._max_run_attempts)
        try:
            while not self._halt.is_set():
                try:
                    await self._beat(queue)
                except Exception:  # a DB hiccup must not kill the heartbeat; next beat retries
                    log.exception("heartbeat failed", worker_id=self._worker_id)
                await asyncio.to_thread(self._halt.wait, self._interval)
        finally:
            await db.dispose()

    async def _beat(self, queue: RunQueue) -> None:
        held = self._held_runs()
        renewed = await queue.renew_leases(self._worker_id, held, self._lease_seconds)
        for run_id in held:
            if run_id not in renewed:
                self._on_lost(run_id)
            elif renewed[run_id]:
                self._on_cancel(run_id)
        recovered = await queue.recover_expired()
        metrics.count_lease_recoveries(requeued=len(recovered))
        if recovered:
            log.warning("recovered runs with expired leases", runs=[str(r) for r in recovered])
        if woken := await queue.wake_overdue():
            log.info("woke runs whose wait timed out", runs=[str(r) for r in woken])
        if given_up := await queue.fail_exhausted():
            metrics.count_lease_recoveries(failed=len(given_up))
            log.error(
                "failed runs whose worker kept stopping (worker_crashed)",
                runs=[str(r) for r in given_up],
                max_run_attempts=self._max_run_attempts,
            )
        if expired := await sweep_expired_approvals(queue.db):
            log.info("expired overdue tool approvals", approvals=expired)
        if overdue := await fail_overdue(queue.db):
            log.info("failed runs past their deadline", runs=[str(r) for r in overdue])
        if orphans := await cancel_orphans(queue.db):
            log.info("cancelled runs of cancelled parents", runs=[str(r) for r in orphans])
        self.beats += 1
