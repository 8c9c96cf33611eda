"""The worker: claims runs from the lane queue and executes them, up to `concurrency` at once.

Side tasks: a LISTEN connection (`agent_runtime_runs` wakes the claim loop in milliseconds,
`agent_runtime_cancel` interrupts a run) and the heartbeat thread (leases, recovery, and a
polled fallback for cancel, and the expiry of overdue tool approvals). The claim loop waits on
"woken | a run finished | poll timeout | stop". On stop it claims nothing more, lets running
runs finish for a grace period, then hands the rest back to the queue. A run whose tool call
awaits approval is parked (`awaiting_approval`): its slot is freed at once, its lane stays held.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

import structlog

from app.config import Settings
from app.db.engine import Database
from app.db.listen import Listener
from app.queue.lease import LeasedRun, LeaseLostError
from app.queue.manager import ClaimedRun, RunQueue
from app.runtime import events as ev
from app.tools.approvals import AwaitingApproval
from app.worker.heartbeat import Heartbeat

if TYPE_CHECKING:
    from app.llm.registry import ModelRegistry
    from app.tools.registry import ToolRegistry

log = structlog.get_logger(__name__)

Executor = Callable[[LeasedRun], Coroutine[Any, Any, None]]


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
        self.queue = RunQueue(db)
        self._execute = execute or agent_executor(settings)
        self._active: dict[UUID, _Active] = {}
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

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
            held_runs=lambda: list(self._active),
            on_cancel=self._threadsafe(self._signal_cancel),
            on_lost=self._threadsafe(self._signal_lost),
        )
        heartbeat.start()
        log.info(
            "worker started", worker_id=self.worker_id, concurrency=self.settings.worker_concurrency
        )
        try:
            await self._claim_loop()
            await self._drain()
        finally:
            heartbeat.stop()
            await listener.stop()
            await asyncio.to_thread(heartbeat.join, 5)
            log.info("worker stopped", worker_id=self.worker_id)

    async def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            while (
                len(self._active) < self.settings.worker_concurrency and not self._stopping.is_set()
            ):
                claimed = await self.queue.claim_next(self.worker_id, self.settings.lease_seconds)
                if claimed is None:
                    break
                self._start(claimed)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.settings.poll_seconds)

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
        leased = active.leased
        run = leased.run
        log_ = log.bind(run_id=str(run.id), attempt=run.attempt)
        try:
            if run.cancel_requested:
                await leased.finish("cancelled", error=_CANCELLED)
                return
            await leased.emit(
                ev.RUN_STARTED if run.attempt == 1 else ev.RUN_RESUMED,
                {"attempt": run.attempt, "workerId": self.worker_id},
            )
            inner = asyncio.create_task(self._execute(leased), name=f"loop-{run.id}")
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
                await leased.finish("cancelled", error=_CANCELLED)
            elif active.stop_reason == "handback":
                await leased.hand_back()
                log_.info("run handed back")
        except LeaseLostError:
            log_.warning("lease lost; another worker owns the run now")
        except Exception as exc:
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
            self._wake.set()  # a slot is free (and the lane may have a next run)

    async def _park(self, leased: LeasedRun, waiting: AwaitingApproval) -> None:
        """A tool call awaits approval: park the run (slot freed, lane kept), or finish it
        cancelled if a cancel was requested first."""
        request = waiting.request
        if await leased.park_for_approval(request):
            log.info(
                "run parked awaiting approval",
                run_id=str(leased.run.id),
                approval_id=str(request.approval_id),
                tool=request.tool,
            )
        else:
            await leased.finish("cancelled", error=_CANCELLED)

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


_CANCELLED = {"code": "cancelled", "message": "cancelled by request"}


def agent_executor(
    settings: Settings,
    *,
    models: ModelRegistry | None = None,
    catalog: ToolRegistry | None = None,
) -> Executor:
    """The agent loop, with one model registry (and its SDK clients) and one tool catalog shared
    by all runs; each run gets the catalog filtered by its own policy (`tools_for_run`)."""
    from app.llm.registry import ModelRegistry
    from app.runtime.loop import execute_run
    from app.tools.registry import default_tool_registry, tools_for_run

    shared_models = models if models is not None else ModelRegistry.from_settings(settings)
    tools = catalog if catalog is not None else default_tool_registry(settings)

    async def execute(leased: LeasedRun) -> None:
        allowed = await tools_for_run(leased.db, leased.run, tools)
        await execute_run(leased, settings=settings, models=shared_models, tools=allowed)

    return execute
