"""The worker: claims runs from the lane queue and executes them, up to `concurrency` at once.

Side tasks: a LISTEN connection (`agent_runtime_runs` wakes the claim loop in milliseconds,
`agent_runtime_cancel` interrupts a run), the heartbeat thread (leases, recovery, and a
polled fallback for cancel, and the expiry of overdue tool approvals) and the `memory-reembed`
task (keeps long-term memory embedded by the configured embedder). The claim loop waits on
"woken | a run finished | poll timeout | stop". On stop it claims nothing more, lets running
runs finish for a grace period, then hands the rest back to the queue. A run whose tool call
awaits approval is parked (`awaiting_approval`), and one whose tool call waits for other runs
(sub-agents, a reply) is parked `waiting`: its slot is freed at once, its lane stays held.

The database may drop out (a restart, a failover, `pg_terminate_backend`): a database error
while claiming is logged and retried with a capped exponential backoff (the worker never exits on
one), and a run cut off by a transient one is handed back to the queue (resumed from its
transcript) instead of being failed, up to its `max_run_attempts`-th claim.

A run that keeps killing its worker is given up on (`worker_crashed`) by the heartbeat's
recovery when its lease expires for the `max_run_attempts`-th time; a run claimed with that many
expiries behind it already (the setting was lowered meanwhile) is failed here at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import socket
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import asyncpg
import structlog
from sqlalchemy import exc as sa_exc

from app.config import Settings
from app.core.errors import LeaseLostError
from app.core.events import RunResumedEvent, RunStartedEvent
from app.db.engine import Database
from app.db.listen import Listener
from app.llm.registry import ModelRegistry
from app.memory.embedders import EmbedderConfigError, embedder_from_settings
from app.memory.reembed import run_reembed
from app.observability import metrics, tracing
from app.queue.lease import LeasedRun
from app.queue.manager import (
    ClaimedRun,
    RunQueue,
    interrupt_started_calls,
    worker_crashed_error,
)
from app.runtime.approval_gate import park_for_approval
from app.runtime.loop import execute_run
from app.runtime.tenant_models import TenantModels
from app.runtime.tool_records import finish_cancelled
from app.tools.approvals import AwaitingApproval
from app.tools.base import AwaitingArrival
from app.tools.catalog import default_tool_sources
from app.tools.registry import ToolRegistry, default_tool_registry, tools_for_run
from app.tools.sources import ToolSources
from app.worker.heartbeat import Heartbeat

log = structlog.get_logger(__name__)

Executor = Callable[[LeasedRun], Coroutine[Any, Any, None]]


# SQLSTATE classes of errors that a retry on a fresh connection can get past: connection
# exception, transaction rollback (serialization, deadlock), insufficient resources (too many
# connections), operator intervention (admin shutdown, cannot connect now), system error.
_TRANSIENT_SQLSTATE_CLASSES = frozenset({"08", "40", "53", "57", "58"})
_BACKOFF_FIRST_SECONDS = 0.5
_BACKOFF_MAX_SECONDS = 15.0
_REEMBED_STOP_SECONDS = 5.0
WINDOW_SLACK_SECONDS = 0.01
"""Claim this long after a collect window ends (its end is compared with the database's now())."""


CLAIM_RETRIED_ERRORS = (
    sa_exc.DBAPIError,
    sa_exc.TimeoutError,
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
)
"""What the claim loop retries (with backoff) rather than dying of. Wider than the transient
errors: a database being restarted or switched over also answers "not accepting connections",
"does not exist" and the like for a while, and a worker that exits stops `serve` altogether."""


def is_transient_db_error(exc: BaseException) -> bool:
    """Whether `exc` is a database outage or blip (worth retrying), not a bug in a query."""
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        # SQLAlchemy wraps its adapter's error, which wraps asyncpg's: look at the innermost.
        inner: BaseException | None = exc.orig
        while inner is not None and inner.__cause__ is not None:
            inner = inner.__cause__
        if inner is None:
            return isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError)
        exc = inner
    if isinstance(exc, OSError | sa_exc.TimeoutError):
        return True  # OSError: refused, reset, unreachable, timed out; TimeoutError: pool full
    if type(exc) is asyncpg.InterfaceError:
        return True  # "connection is closed" (its subclasses are misuse: bad data, config)
    sqlstate = getattr(exc, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate[:2] in _TRANSIENT_SQLSTATE_CLASSES


def backoff_seconds(failures: int) -> float:
    """Delay before retry number `failures` (1, 2, ...): doubling from 0.5 s up to 15 s, with
    ±20 % jitter so that the workers of a fleet do not all retry at the same instant."""
    delay = min(_BACKOFF_MAX_SECONDS, _BACKOFF_FIRST_SECONDS * 2.0 ** min(failures - 1, 16))
    return delay * random.uniform(0.8, 1.2)


def _error_summary(exc: BaseException) -> dict[str, str]:
    """What to log about a database error: the innermost error's type, SQLSTATE and first line
    (not SQLAlchemy's rendering, which quotes the statement and its parameters)."""
    inner = exc.orig if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None else exc
    while inner.__cause__ is not None:
        inner = inner.__cause__
    summary = {"error_type": type(inner).__name__, "error": str(inner).split("\n", 1)[0][:200]}
    if (sqlstate := getattr(inner, "sqlstate", None)) is not None:
        summary["sqlstate"] = str(sqlstate)
    return summary


def new_worker_id() -> str:
    """A worker id that names the host and process, unique across restarts."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass
class _Active:
    """A run this worker is executing."""

    leased: LeasedRun
    task: asyncio.Task[None] | None = None
    stop_reason: str | None = None  # "cancel" | "lost" | "handback"
    stopped: asyncio.Event = field(default_factory=asyncio.Event)


class Worker:
    """Runs claimed runs with `execute`, one asyncio task per run."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        *,
        worker_id: str | None = None,
        execute: Executor | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.worker_id = worker_id or new_worker_id()
        self.queue = RunQueue(db, max_run_attempts=settings.max_run_attempts)
        self._execute = execute or agent_executor(settings)
        self._active: dict[UUID, _Active] = {}
        self._wake = asyncio.Event()
        self._full = False
        """The last claim round stopped because every slot was busy (`_claim_available`)."""
        self._stopping = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.claim_failures = 0
        """Consecutive failed claim attempts (0 once the database answers again)."""

    # ------------------------------------------------------------------ control

    def request_stop(self) -> None:
        """Stop claiming; finish or hand back what is held; then `run()` returns."""
        self._stopping.set()
        self._wake.set()

    @property
    def active_runs(self) -> list[UUID]:
        """Ids of the runs being executed now."""
        return list(self._active)

    # ------------------------------------------------------------------ main loop

    async def run(self) -> None:
        """Claim and execute runs until `request_stop()`."""
        self._loop = asyncio.get_running_loop()
        listener = Listener(
            self.db.url,
            {
                "agent_runtime_runs": lambda _p: self._wake.set(),
                "agent_runtime_cancel": self._on_cancel_notify,
            },
        )
        listener.on_reconnect = self._wake.set
        await listener.start()
        heartbeat = Heartbeat(
            database_url=self.db.url,
            worker_id=self.worker_id,
            lease_seconds=self.settings.lease_seconds,
            interval=self.settings.heartbeat_seconds,
            max_run_attempts=self.settings.max_run_attempts,
            held_runs=lambda: list(self._active),
            on_cancel=self._threadsafe(self._signal_cancel),
            on_lost=self._threadsafe(self._signal_lost),
        )
        heartbeat.start()
        reembed: asyncio.Task[None] | None = None
        log.info(
            "worker started", worker_id=self.worker_id, concurrency=self.settings.worker_concurrency
        )
        try:
            reembed = self._start_reembed()
            await self._claim_loop()
            await self._drain()
        finally:
            heartbeat.stop()
            await self._stop_reembed(reembed)
            await listener.stop()
            await asyncio.to_thread(heartbeat.join, 5)
            if (close := getattr(self._execute, "aclose", None)) is not None:
                await close()
            log.info("worker stopped", worker_id=self.worker_id)

    async def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                window = await self._claim_available()
            except CLAIM_RETRIED_ERRORS as exc:
                self.claim_failures += 1
                delay = backoff_seconds(self.claim_failures)
                log.log(
                    logging.WARNING if is_transient_db_error(exc) else logging.ERROR,
                    "claiming failed; retrying",
                    worker_id=self.worker_id,
                    failures=self.claim_failures,
                    retry_in=round(delay, 2),
                    **_error_summary(exc),
                )
                # Only stop cuts the backoff short: waking on every NOTIFY would hammer a
                # database that is refusing connections.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), timeout=delay)
                continue
            if self.claim_failures:
                log.info("claiming again: database is back", worker_id=self.worker_id)
                self.claim_failures = 0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self._idle_wait(window))

    def _idle_wait(self, window: float | None) -> float:
        """How long to wait for a wake-up before claiming again: the poll interval, or less when
        a queued run's collect window ends sooner (`window`, reported by the last claim: nothing
        notifies that, the run just becomes claimable). With every slot busy, a finishing run
        wakes the loop anyway."""
        if window is None:
            return self.settings.poll_seconds
        return min(self.settings.poll_seconds, window + WINDOW_SLACK_SECONDS)

    async def _claim_available(self) -> float | None:
        """Claim runs until the slots are full or no run is claimable, as many per statement as
        there are free slots (`RunQueue.claim_batch`). Returns the seconds until the next collect
        window ends as the last claim saw it (None: none, or every slot is busy)."""
        while not self._stopping.is_set():
            free = self.settings.worker_concurrency - len(self._active)
            # Full: a finishing run must wake the loop (what it left behind was not looked at).
            self._full = free <= 0
            if self._full:
                return None
            began = time.perf_counter()
            batch = await self.queue.claim_batch(
                self.worker_id, self.settings.lease_seconds, limit=free
            )
            metrics.observe_claim(time.perf_counter() - began, claimed=bool(batch.runs))
            for claimed in batch.runs:
                if claimed.attempt == 1:
                    metrics.observe_queue_wait(claimed.queued_seconds)
                self._start(claimed)
            if len(batch.runs) < free:
                return batch.next_window
        return None

    def _start_reembed(self) -> asyncio.Task[None] | None:
        """Start the `memory-reembed` side task (None if the embedder is misconfigured).

        Every worker runs one: a per-tenant advisory lock keeps two workers from embedding the
        same tenant's batch, and a vector is only written where the entry is still stale
        (`app/memory/reembed.py`).
        """
        try:
            embedder = embedder_from_settings(self.settings)
        except EmbedderConfigError as exc:
            log.error("memory re-embed not started: embedder misconfigured", error=str(exc))
            return None
        return asyncio.create_task(
            run_reembed(
                self.db,
                embedder,
                self._stopping,
                batch=self.settings.memory_reembed_batch,
                interval_seconds=self.settings.memory_reembed_interval_seconds,
            ),
            name="memory-reembed",
        )

    async def _stop_reembed(self, task: asyncio.Task[None] | None) -> None:
        """Wait for the re-embed task's current batch (it stops on `_stopping`), then cancel it
        (a cancelled batch writes nothing; its entries stay stale for the next worker)."""
        if task is None:
            return
        _, pending = await asyncio.wait({task}, timeout=_REEMBED_STOP_SECONDS)
        if pending:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def _start(self, claimed: ClaimedRun) -> None:
        active = _Active(leased=LeasedRun(self.db, claimed, self.worker_id))
        self._active[claimed.id] = active
        active.task = asyncio.create_task(self._supervise(active), name=f"run-{claimed.id}")

    async def _drain(self) -> None:
        """After stop: give runs `shutdown_grace_seconds`, then hand the rest back."""
        tasks = [a.task for a in self._active.values() if a.task is not None]
        if tasks:
            log.info("waiting for runs to finish", runs=len(tasks))
            _, pending = await asyncio.wait(tasks, timeout=self.settings.shutdown_grace_seconds)
            for active in list(self._active.values()):
                if active.task in pending:
                    self._interrupt(active, "handback")
            if pending:
                await asyncio.wait(pending)

    # ------------------------------------------------------------------ one run

    async def _supervise(self, active: _Active) -> None:
        run = active.leased.run
        span = tracing.run_span(
            run.trace_context,
            run_id=str(run.id),
            agent_id=str(run.agent_id),
            session_id=str(run.session_id),
            attempt=run.attempt,
        )
        with span, metrics.RUNS_ACTIVE.track_inprogress():
            await self._supervise_traced(active)

    async def _supervise_traced(self, active: _Active) -> None:
        leased = active.leased
        run = leased.run
        log_ = log.bind(run_id=str(run.id), attempt=run.attempt)
        try:
            if run.cancel_requested:
                await finish_cancelled(leased)
                return
            if run.lease_expiries >= self.settings.max_run_attempts:
                await self._give_up(leased)
                return
            if not run.started_stored:
                started = RunStartedEvent if run.attempt == 1 else RunResumedEvent
                leased.defer([started(attempt=run.attempt, worker_id=self.worker_id)])
            inner = asyncio.create_task(self._execute_until_parked(leased), name=f"loop-{run.id}")
            stopper = asyncio.create_task(active.stopped.wait())
            done, _ = await asyncio.wait({inner, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if inner in done:
                try:
                    inner.result()  # the loop finished the run (or raised: handled below)
                except AwaitingApproval as waiting:
                    await self._park(leased, waiting)
                return
            inner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await inner
            if active.stop_reason == "cancel":
                await finish_cancelled(leased)
            elif active.stop_reason == "handback":
                await leased.hand_back()
                log_.info("run handed back")
        except LeaseLostError:
            log_.warning("lease lost; another worker owns the run now")
        except Exception as exc:
            # The same limit as for crashes, counted in claims: a run that meets a "transient"
            # error every time (a statement timeout, a query that kills its connection) is not
            # handed back forever either.
            if is_transient_db_error(exc) and run.attempt < self.settings.max_run_attempts:
                await self._hand_back_after_db_error(leased, exc)
                return
            log_.exception("run crashed")
            with contextlib.suppress(LeaseLostError):
                await leased.finish(
                    "failed",
                    error={
                        "code": "internal_error",
                        "message": f"worker error: {type(exc).__name__}",
                    },
                )
        finally:
            self._active.pop(run.id, None)
            # A slot is free. Claim again only if the last claim stopped at full slots: otherwise
            # it found nothing more, and what this run's end makes claimable (its lane's next
            # run) is NOTIFYed to every worker by the status change, this one included.
            if self._full:
                self._wake.set()

    async def _execute_until_parked(self, leased: LeasedRun) -> None:
        """Execute the run; when a tool call waits for other runs (`AwaitingArrival`), park it
        `waiting` (slot freed, lane kept). If what it waits for has already arrived, execute it
        again at once: the waiting call runs again and finds it."""
        while True:
            try:
                await self._execute(leased)
                return
            except AwaitingArrival as waiting:
                awaited = waiting.awaited
                outcome = await leased.park_waiting(waiting.wake_at, awaited)
            if outcome == "parked":
                log.info("run parked waiting", run_id=str(leased.run.id), awaited=len(awaited))
                return
            if outcome == "cancel":
                await finish_cancelled(leased)
                return

    async def _give_up(self, leased: LeasedRun) -> None:
        """The run's worker already stopped `max_run_attempts` times (the limit was lowered
        since its last lease expired): fail it `worker_crashed` instead of running it again."""
        error = worker_crashed_error(leased.run.lease_expiries, self.settings.max_run_attempts)
        log.warning("run's worker stopped too often; giving up", run_id=str(leased.run.id), **error)
        async with leased.write() as w:
            await interrupt_started_calls(
                w.session, leased.run.principal, leased.run.id, error["message"]
            )
        await leased.finish("failed", error=error)

    async def _hand_back_after_db_error(self, leased: LeasedRun, exc: Exception) -> None:
        """A database blip interrupted the run: return it to its lane to be resumed from the
        stored transcript, rather than failing it. If the database is still away, the hand-back
        fails too, and the lease (no longer renewed) expires into the same outcome."""
        log_ = log.bind(run_id=str(leased.run.id), attempt=leased.run.attempt)
        log_.warning("database error during the run; handing it back", **_error_summary(exc))
        try:
            await leased.hand_back()
        except LeaseLostError:
            pass
        except Exception as again:
            if not is_transient_db_error(again):
                raise
            log_.warning("hand-back failed; the lease will expire instead", **_error_summary(again))

    async def _park(self, leased: LeasedRun, waiting: AwaitingApproval) -> None:
        """A tool call awaits approval: park the run (slot freed, lane kept), or finish it
        cancelled if a cancel was requested first."""
        request = waiting.request
        if await park_for_approval(leased, request):
            log.info(
                "run parked awaiting approval",
                run_id=str(leased.run.id),
                approval_id=str(request.approval_id),
                tool=request.tool,
            )
        else:
            await finish_cancelled(leased)

    # ------------------------------------------------------------------ signals

    def _interrupt(self, active: _Active, reason: str) -> None:
        if active.stop_reason is None:
            active.stop_reason = reason
            active.stopped.set()

    def _signal_cancel(self, run_id: UUID) -> None:
        active = self._active.get(run_id)
        if active is not None:
            self._interrupt(active, "cancel")

    def _signal_lost(self, run_id: UUID) -> None:
        active = self._active.get(run_id)
        if active is not None:
            self._interrupt(active, "lost")

    def _on_cancel_notify(self, payload: str) -> None:
        with contextlib.suppress(ValueError):
            self._signal_cancel(UUID(payload))

    def _threadsafe(self, fn: Callable[[UUID], None]) -> Callable[[UUID], None]:
        def call(run_id: UUID) -> None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(fn, run_id)

        return call


class AgentExecutor:
    """The agent loop, with one model registry (and its SDK clients), one tool catalog and one
    set of tool sources (MCP connections, HTTP tools) shared by all runs of the worker; each run
    gets the catalog and its tenant's sources' tools filtered by its own policy
    (`tools_for_run`), and the models of its tenant's own provider keys where it stores them
    (`TenantModels`)."""

    def __init__(
        self,
        settings: Settings,
        *,
        models: ModelRegistry | None = None,
        catalog: ToolRegistry | None = None,
        sources: ToolSources | None = None,
    ) -> None:
        self.settings = settings
        self.models = TenantModels(settings, models)
        self.catalog = catalog if catalog is not None else default_tool_registry(settings)
        self.sources = sources if sources is not None else default_tool_sources(settings)

    async def __call__(self, leased: LeasedRun) -> None:
        async def allowed() -> ToolRegistry:
            return await tools_for_run(leased.db, leased.run, self.catalog, self.sources)

        await execute_run(leased, settings=self.settings, models=self.models, tools=allowed)

    async def aclose(self) -> None:
        """Close the tool sources' connections (the worker stops)."""
        await self.sources.aclose()


def agent_executor(
    settings: Settings,
    *,
    models: ModelRegistry | None = None,
    catalog: ToolRegistry | None = None,
    sources: ToolSources | None = None,
) -> AgentExecutor:
    """The worker's default executor (`AgentExecutor`)."""
    return AgentExecutor(settings, models=models, catalog=catalog, sources=sources)
