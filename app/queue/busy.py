"""`ifBusy`: what a message posted to a session that already has a live run does.

A session is *busy* while one of its runs is `queued`, `running`, `awaiting_approval` or
`waiting`. A post names a mode, or takes its agent's `ifBusy` setting (default `enqueue`):

* `enqueue`: a new run at the end of the lane (what every post did before modes existed);
* `reject`: refused (`SessionBusyError`, 409 `session_busy`), nothing written;
* `interrupt`: every live run is stopped (idle ones cancelled at once, a running one asked to
  cancel, each with a `run.interrupted` event first), and the new run is queued: it runs next;
* `steer`: the message goes into the oldest live run's inbox (`run_inbox`, kind `steer`): the
  run reads it at its next model boundary (`app.runtime.inbox`); nothing live: a new run;
* `collect`: the message is merged into the lane's last queued run if that is a collecting run
  (input `collect: true`), else it starts one; a collecting run is not claimed before
  `not_before` (now + the collect window, pushed back by each merge).

Posts to one session are serialised by a lock on its `agent_sessions` row, taken in the
transaction that writes the run (so the second of two posts sees the first one's run). Run rows
are locked after the session row, while a worker's transcript writes lock a run row, then its
session row: to never deadlock with a worker, run rows are locked with a short `lock_timeout`,
and a post that times out raises `LaneContendedError`: its whole transaction is rolled back
(releasing the session row) and tried again (`retry_contended`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, TypeVar, get_args
from uuid import UUID

from sqlalchemy import func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.principal import Principal
from app.core.errors import SessionBusyError
from app.core.events import RunCancelledEvent, RunInterruptedEvent, RunQueuedEvent
from app.db.models import Agent, AgentSession, Run, ToolApproval, ToolExecution
from app.observability.tracing import current_trace_context
from app.queue.event_log import emit_unleased, insert_events
from app.queue.run_audit import run_cancelled, run_posted
from app.queue.sql import query

IfBusy = Literal["enqueue", "reject", "interrupt", "steer", "collect"]
"""What a message posted to a busy session does (see the module docstring)."""

IF_BUSY_MODES: tuple[str, ...] = get_args(IfBusy)
DEFAULT_IF_BUSY: IfBusy = "enqueue"
LIVE_STATUSES = ("queued", "running", "awaiting_approval", "waiting")
"""A run in one of these holds or waits for its lane: the session is busy."""

PostedStatus = Literal["queued", "steered", "collected"]
"""What became of a posted message: its own queued run, steered into a live run, or collected
into a queued collecting run."""

INTERRUPTED_REASON = "interrupted by a new message"
RUN_LOCK_TIMEOUT = "200ms"
"""How long a post waits for a run row a worker is writing (its fenced transactions are short;
a longer wait is a lock cycle with this post's session lock, which the retry breaks)."""

_LOCK_FAILURES = frozenset({"55P03", "40P01"})  # lock_not_available, deadlock_detected
_RETRIES = 50

T = TypeVar("T")
Admit = Callable[[], Awaitable[None]]
"""Awaited before a post inserts a new run; raises to refuse it."""


class LaneContendedError(Exception):
    """A run row of the session stayed locked (a worker writing it, maybe waiting for the session
    row this post holds): roll the transaction back and post again."""


@dataclass(frozen=True, slots=True)
class Lane:
    """The session a message is posted to, locked for this transaction."""

    session_id: UUID
    session_key: str
    agent_id: UUID
    """The agent the message runs with (`agentId`, else the session's)."""


@dataclass(frozen=True, slots=True)
class Posted:
    """Where a posted message went: `run_id` is its own run (`queued`), the live run it was
    steered into (`steered`) or the collecting run it joined (`collected`)."""

    run_id: UUID
    session_key: str
    status: PostedStatus
    merged: bool = False
    """`collected` into a collecting run that was already queued (not a new one)."""


@dataclass(frozen=True, slots=True)
class _Live:
    id: UUID
    status: str
    input: dict[str, Any]


async def retry_contended(attempt: Callable[[], Awaitable[T]]) -> T:
    """`attempt()` (one whole transaction), again after a short random pause while it raises
    `LaneContendedError`; the last failure is raised."""
    for n in range(1, _RETRIES + 1):
        try:
            return await attempt()
        except LaneContendedError:
            if n == _RETRIES:
                raise
            await asyncio.sleep(random.uniform(0.01, 0.05) * min(n, 5))
    raise AssertionError("unreachable")


async def lock_session(s: AsyncSession, session_id: UUID) -> None:
    """Serialise posts to the session until this transaction ends. `FOR NO KEY UPDATE`, not
    `FOR UPDATE`: it does not block the foreign-key checks of runs inserted into the session
    (e.g. the follow-up runs the run-ended trigger creates)."""
    await s.execute(
        select(AgentSession.id).where(AgentSession.id == session_id).with_for_update(key_share=True)
    )


async def if_busy_of(s: AsyncSession, agent_id: UUID) -> IfBusy:
    """The agent's `ifBusy` setting (`agents.settings`), `enqueue` if unset or unreadable."""
    value = await s.scalar(select(Agent.settings["ifBusy"].astext).where(Agent.id == agent_id))
    return if_busy_setting(value)


def if_busy_setting(value: object) -> IfBusy:
    """An agent's stored `ifBusy` value as a mode, `enqueue` if unset or unreadable."""
    for mode in get_args(IfBusy):
        if value == mode:
            return mode  # type: ignore[no-any-return]
    return DEFAULT_IF_BUSY


async def post_message(
    s: AsyncSession,
    principal: Principal,
    lane: Lane,
    message: str,
    *,
    if_busy: IfBusy | None,
    collect_window_seconds: float,
    admit: Admit | None = None,
    session_locked: bool = False,
) -> Posted:
    """Post `message` to the lane in the caller's tenant transaction, as `if_busy` (None: the
    agent's setting) says. Raises SessionBusyError (`reject`), LaneContendedError (retry).

    `admit` is awaited right before a new run is inserted (not when the message goes into a
    live or collecting run): it raises to refuse the run (the tenant's quotas).
    `session_locked`: the transaction already holds the session row's lock (it updated or
    inserted the row), so it is not locked again."""
    if not session_locked:
        await lock_session(s, lane.session_id)
    mode = if_busy or await if_busy_of(s, lane.agent_id)
    if mode == "enqueue":  # whatever is live: the lane's live runs need not be read
        return await _queued(s, principal, lane, {"message": message}, mode, admit)
    live = await _live_runs(s, lane.session_id)
    if not live:
        return await _queued(s, principal, lane, {"message": message}, mode, admit)
    if mode == "reject":
        busy = next((r for r in live if r.status != "queued"), live[0])
        raise SessionBusyError(lane.session_key, busy.id, busy.status)
    if mode == "interrupt":
        return await _interrupt(s, principal, lane, message, live, admit)
    if mode == "steer":
        return await _steer(s, principal, lane, message, live, admit)
    return await _collect(s, principal, lane, message, live, collect_window_seconds, admit)


async def _live_runs(s: AsyncSession, session_id: UUID) -> list[_Live]:
    rows = await s.execute(
        select(Run.id, Run.status, Run.input)
        .where(Run.session_id == session_id, Run.status.in_(LIVE_STATUSES))
        .order_by(Run.queue_seq)
    )
    return [_Live(r.id, r.status, r.input) for r in rows]


async def _lock_run(s: AsyncSession, run_id: UUID) -> str | None:
    """Lock the run's row (waiting at most `RUN_LOCK_TIMEOUT`); its status now (`stopping`: a
    running run already asked to cancel)."""
    try:
        await s.execute(text(f"SET LOCAL lock_timeout = '{RUN_LOCK_TIMEOUT}'"))
        row = (
            await s.execute(
                select(Run.status, Run.cancel_requested_at)
                .where(Run.id == run_id)
                .with_for_update()
            )
        ).one_or_none()
        await s.execute(text("SET LOCAL lock_timeout TO DEFAULT"))
    except DBAPIError as exc:
        if is_lock_failure(exc):
            raise LaneContendedError(f"run {run_id} is locked") from exc
        raise
    if row is None:
        return None
    stopping = row.status == "running" and row.cancel_requested_at is not None
    return "stopping" if stopping else str(row.status)


def is_lock_failure(exc: DBAPIError) -> bool:
    """The statement lost a lock wait (`lock_timeout` or a deadlock it was chosen to break):
    rolling back and posting again (`LaneContendedError`) is the cure."""
    return _sqlstate(exc) in _LOCK_FAILURES


def _sqlstate(exc: DBAPIError) -> str | None:
    inner: BaseException | None = exc.orig
    while inner is not None:
        if (code := getattr(inner, "sqlstate", None)) is not None:
            return str(code)
        inner = inner.__cause__
    return None


async def insert_run(
    s: AsyncSession,
    principal: Principal,
    lane: Lane,
    run_input: dict[str, Any],
    *,
    not_before_seconds: float | None = None,
    parent_run_id: UUID | None = None,
    deadline_seconds: float | None = None,
    if_busy: str | None = None,
) -> UUID:
    """A new queued run at the end of the lane, with its `run.queued` event and its
    `run.created` audit event (`if_busy`: the mode it was posted with; None for runs posted by
    tools) (claimable after `not_before_seconds`; a sub-agent's: its parent, and its hard
    deadline from now)."""
    values: dict[str, Any] = {
        "tenant_id": principal.tenant_id,
        "session_id": lane.session_id,
        "agent_id": lane.agent_id,
        "user_id": principal.user_id,
        "input": run_input,
        "parent_run_id": parent_run_id,
        "trace_context": current_trace_context(),
        "last_event_seq": 1,  # its `run.queued`, stored next (no seq to reserve on a new run)
    }
    if not_before_seconds is not None:
        values["not_before"] = func.now() + timedelta(seconds=not_before_seconds)
    if deadline_seconds is not None:
        values["deadline_at"] = func.now() + timedelta(seconds=deadline_seconds)
    run_id: UUID | None = await s.scalar(insert(Run).values(**values).returning(Run.id))
    assert run_id is not None
    await insert_events(
        s,
        run_id=run_id,
        tenant_id=principal.tenant_id,
        last_seq=1,
        events=[RunQueuedEvent(session_key=lane.session_key)],
    )
    await run_posted(
        s,
        principal,
        "run.created",
        run_id,
        agent_id=lane.agent_id,
        session_key=lane.session_key,
        if_busy=if_busy,
        message=str(run_input.get("message", "")),
        parent_run_id=parent_run_id,
    )
    return run_id


async def _queued(
    s: AsyncSession,
    principal: Principal,
    lane: Lane,
    run_input: dict[str, Any],
    mode: IfBusy,
    admit: Admit | None,
) -> Posted:
    if admit is not None:
        await admit()
    run_id = await insert_run(s, principal, lane, run_input, if_busy=mode)
    return Posted(run_id=run_id, session_key=lane.session_key, status="queued")


async def close_approvals(s: AsyncSession, run_id: UUID, reason: str) -> None:
    """A cancelled run's pending approval expires; its waiting call is recorded as failed."""
    await s.execute(
        update(ToolApproval)
        .where(ToolApproval.run_id == run_id, ToolApproval.status == "pending")
        .values(status="expired", decided_at=func.now(), decision_reason=reason)
    )
    await s.execute(
        update(ToolExecution)
        .where(ToolExecution.run_id == run_id, ToolExecution.status == "awaiting_approval")
        .values(status="failed", error={"message": reason}, finished_at=func.now())
    )


async def _interrupt(
    s: AsyncSession,
    principal: Principal,
    lane: Lane,
    message: str,
    live: list[_Live],
    admit: Admit | None,
) -> Posted:
    """Queue the new run, then stop every live run before it: idle ones are cancelled now, a
    running one is asked to cancel (its worker stops it within seconds and finishes it
    `cancelled`); one already stopping is left alone (it was interrupted or cancelled before).
    The new run is queued behind the stopping run only, so it runs next."""
    posted = await _queued(s, principal, lane, {"message": message}, "interrupt", admit)
    interrupted = RunInterruptedEvent(by_run_id=posted.run_id)
    for run in live:
        status = await _lock_run(s, run.id)
        if status in ("queued", "awaiting_approval", "waiting"):
            await emit_unleased(s, run.id, principal.tenant_id, [interrupted])
            if await s.scalar(query("cancel_idle"), {"run_id": run.id}) is not None:
                await close_approvals(s, run.id, INTERRUPTED_REASON)
                cancelled = RunCancelledEvent(reason=INTERRUPTED_REASON)
                await emit_unleased(s, run.id, principal.tenant_id, [cancelled])
                await run_cancelled(
                    s,
                    principal,
                    run.id,
                    stopping=False,
                    reason=INTERRUPTED_REASON,
                    by_run_id=posted.run_id,
                )
        elif status == "running":
            await emit_unleased(s, run.id, principal.tenant_id, [interrupted])
            await s.execute(query("request_cancel_running"), {"run_id": run.id})
            await run_cancelled(
                s,
                principal,
                run.id,
                stopping=True,
                reason=INTERRUPTED_REASON,
                by_run_id=posted.run_id,
            )
    return posted


async def _steer(
    s: AsyncSession,
    principal: Principal,
    lane: Lane,
    message: str,
    live: list[_Live],
    admit: Admit | None,
) -> Posted:
    """Into the inbox of the oldest run still live and not being stopped (locked first: a run
    finishing at the same moment either sees the row, and queues it as a follow-up, or is seen
    ended here)."""
    for run in live:
        if await _lock_run(s, run.id) in LIVE_STATUSES:
            await s.execute(
                text("SELECT agent_runtime_deliver(:run_id, 'steer', NULL, :message, '{}')"),
                {"run_id": run.id, "message": message},
            )
            await run_posted(
                s,
                principal,
                "run.steered",
                run.id,
                agent_id=lane.agent_id,
                session_key=lane.session_key,
                if_busy="steer",
                message=message,
            )
            return Posted(run_id=run.id, session_key=lane.session_key, status="steered")
    return await _queued(s, principal, lane, {"message": message}, "steer", admit)


async def _collect(
    s: AsyncSession,
    principal: Principal,
    lane: Lane,
    message: str,
    live: list[_Live],
    window_seconds: float,
    admit: Admit | None,
) -> Posted:
    """Merge into the lane's last queued run if it is a collecting one still queued (a worker
    claiming it first makes the UPDATE match nothing: then a new collecting run)."""
    tail = live[-1]
    collecting = tail.status == "queued" and tail.input.get("collect") is True
    if collecting and await _lock_run(s, tail.id) == "queued":
        merged = await s.scalar(
            query("collect_into"),
            {"run_id": tail.id, "message": message, "window": window_seconds},
        )
        if merged is not None:
            await run_posted(
                s,
                principal,
                "run.collected",
                merged,
                agent_id=lane.agent_id,
                session_key=lane.session_key,
                if_busy="collect",
                message=message,
            )
            return Posted(
                run_id=merged, session_key=lane.session_key, status="collected", merged=True
            )
    run_input = {"message": message, "messages": [message], "collect": True}
    if admit is not None:
        await admit()
    run_id = await insert_run(
        s, principal, lane, run_input, not_before_seconds=window_seconds, if_busy="collect"
    )
    return Posted(run_id=run_id, session_key=lane.session_key, status="collected")
