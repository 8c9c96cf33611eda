"""The stored record of each tool call: its `tool_executions` row, its result in the transcript
and its `tool.*` event, written in fenced transactions of the run (started, finished, refused).

A call is recorded as started (`tool.started`, a `tool_executions` row) before it runs, and its
result is stored with its `tool.completed`/`tool.failed` event in one transaction after it. A
call that is not executed (policy, cap, denied approval) is stored failed in one transaction.

Every `tool.*` event carries `executionId`, the id of the call's `tool_executions` row (one per
run and call, kept across retries and approvals), so clients can join the stream with
`GET /runs/{runId}/tools`. The id is known only once the row is written, inside the same fenced
transaction; `LeasedRun.write` appends its events after the body, so the body fills it in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from sqlalchemy import case, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.events import RunEvent, ToolCompletedEvent, ToolFailedEvent, ToolStartedEvent
from app.core.transcript import AssistantMessage, ToolCall, ToolResult, load_message
from app.db.models import SessionMessage, ToolApproval, ToolExecution
from app.queue.lease import FencedWrite, LeasedRun
from app.queue.manager import execution_ms
from app.queue.run_audit import tool_executed
from app.runtime.transcript_store import insert_messages


@dataclass(frozen=True, slots=True)
class ToolAttempt:
    """What the store knew about a tool call before this attempt started."""

    previous_status: str | None  # None: never started before

    @property
    def interrupted(self) -> bool:
        """A previous attempt started the call and died before recording its outcome."""
        return self.previous_status == "started"


async def tool_started(
    leased: LeasedRun,
    call: ToolCall,
    *,
    approval_id: UUID | None = None,
    purpose: str | None = None,
) -> ToolAttempt:
    """Record that `call` is about to execute and emit `tool.started` (with `purpose`, if
    given: a housekeeping call such as a memory flush, not a turn of the conversation)."""
    event = ToolStartedEvent(tool_call_id=call.id, name=call.name, args=call.args, purpose=purpose)
    async with leased.write([event]) as w:
        previous = await w.session.scalar(
            select(ToolExecution.status).where(
                ToolExecution.run_id == w.run.id, ToolExecution.tool_call_id == call.id
            )
        )
        event.execution_id = await upsert_execution(
            w,
            call,
            {"status": "started"},
            approval_id=approval_id,
            on_conflict={
                # Waiting for approval was not an attempt at running the call.
                "attempt": case(
                    (ToolExecution.status == "awaiting_approval", ToolExecution.attempt),
                    else_=ToolExecution.attempt + 1,
                ),
                "started_at": func.now(),
                "finished_at": None,
                "result": None,
                "error": None,
            },
        )
    return ToolAttempt(previous_status=previous)


async def upsert_execution(
    w: FencedWrite,
    call: ToolCall,
    values: dict[str, Any],
    *,
    approval_id: UUID | None = None,
    on_conflict: dict[str, Any] | None = None,
) -> UUID:
    """Insert the call's `tool_executions` row with `values`, or update it with them (and
    `on_conflict`); the worker is this one, the approval is kept unless a new one is given.
    Returns the row's id."""
    run = w.run
    stmt = insert(ToolExecution).values(
        tenant_id=run.tenant_id,
        run_id=run.id,
        session_id=run.session_id,
        tool_call_id=call.id,
        name=call.name,
        args=call.args,
        worker_id=w.worker_id,
        approval_id=approval_id,
        **values,
    )
    approval = func.coalesce(stmt.excluded.approval_id, ToolExecution.approval_id)
    execution_id: UUID | None = await w.session.scalar(
        stmt.on_conflict_do_update(
            constraint="tool_executions_run_call_key",
            set_={
                "worker_id": w.worker_id,
                "approval_id": approval,
                **values,
                **(on_conflict or {}),
            },
        ).returning(ToolExecution.id)
    )
    assert execution_id is not None
    return execution_id


async def tool_refused(
    leased: LeasedRun, call: ToolCall, error: str, *, approval_id: UUID | None = None
) -> ToolResult:
    """Store a call that is not executed (policy, cap, denial) as failed, with its event."""
    result = ToolResult(tool_call_id=call.id, name=call.name, ok=False, error=error)
    event = ToolFailedEvent(tool_call_id=call.id, name=call.name, error=error)
    async with leased.write([event]) as w:
        await insert_messages(w, [result])
        event.execution_id = await upsert_execution(
            w,
            call,
            {"status": "failed", "error": {"message": error}, "finished_at": func.now()},
            approval_id=approval_id,
        )
        await tool_executed(
            w.session,
            w.run.principal,
            run_id=w.run.id,
            execution_id=event.execution_id,
            tool_call_id=call.id,
            name=call.name,
            args=call.args,
            outcome="failed",
            duration_ms=None,
            refused=True,
        )
    return result


async def tool_finished(
    leased: LeasedRun,
    result: ToolResult,
    *,
    interrupted: bool = False,
    in_transcript: bool = True,
    purpose: str | None = None,
) -> None:
    """Store the tool's result row, its execution outcome and its event, atomically.

    `in_transcript=False`: no transcript row (a housekeeping call, e.g. a memory flush, whose
    call was never an assistant message); `purpose` goes into the event as in `tool_started`.
    """
    event: ToolCompletedEvent | ToolFailedEvent
    if result.ok:
        event = ToolCompletedEvent(
            tool_call_id=result.tool_call_id,
            name=result.name,
            purpose=purpose,
            result=result.result,
        )
    else:
        event = ToolFailedEvent(
            tool_call_id=result.tool_call_id, name=result.name, purpose=purpose, error=result.error
        )
    if interrupted:
        status = "interrupted"
    else:
        status = "completed" if result.ok else "failed"
    async with leased.write([event]) as w:
        if in_transcript:
            await insert_messages(w, [result])
        row = (
            await w.session.execute(
                update(ToolExecution)
                .where(
                    ToolExecution.run_id == w.run.id,
                    ToolExecution.tool_call_id == result.tool_call_id,
                )
                .values(
                    status=status,
                    result=result.result if result.ok else None,
                    error=None if result.ok else {"message": result.error},
                    finished_at=func.now(),
                )
                .returning(ToolExecution.id, ToolExecution.args, execution_ms())
            )
        ).one_or_none()
        if row is not None:  # always, for a call `tool_started` recorded
            event.execution_id = row[0]
            await tool_executed(
                w.session,
                w.run.principal,
                run_id=w.run.id,
                execution_id=row[0],
                tool_call_id=result.tool_call_id,
                name=result.name,
                args=row[1],
                outcome=status,
                duration_ms=row[2],
            )


async def executions_of(
    session: AsyncSession, run_id: UUID
) -> list[tuple[ToolExecution, str | None, str | None]]:
    """A run's `tool_executions` rows in the order they started, each with its approval's status
    and decider (None without an approval)."""
    rows = await session.execute(
        select(ToolExecution, ToolApproval.status, ToolApproval.decided_by)
        .outerjoin(ToolApproval, ToolApproval.id == ToolExecution.approval_id)
        .where(ToolExecution.run_id == run_id)
        .order_by(ToolExecution.started_at, ToolExecution.tool_call_id)
    )
    return [(row[0], row[1], row[2]) for row in rows]


CANCELLED_RESULT = "cancelled: the run was stopped before this call finished"
"""The stored result of a call its run was cancelled in the middle of (or before) running."""

CANCELLED = {"code": "cancelled", "message": "cancelled by request"}
"""The error of a run cancelled by request (`POST /cancel`, `ifBusy=interrupt`)."""


async def close_open_calls(w: FencedWrite, error: str = CANCELLED_RESULT) -> list[RunEvent]:
    """Store a failed result (`error`) for every call of the run's latest assistant message that
    has none, in the fenced transaction `w` (the run is ending: every call in the transcript
    keeps exactly one result); their `tool.failed` events, for the caller to store."""
    rows = await w.session.scalars(
        select(SessionMessage.payload)
        .where(SessionMessage.run_id == w.run.id)
        .order_by(SessionMessage.seq)
    )
    open_calls: dict[str, ToolCall] = {}
    for payload in rows:
        message = load_message(payload)
        if isinstance(message, AssistantMessage):
            open_calls = {call.id: call for call in message.tool_calls}
        elif isinstance(message, ToolResult):
            open_calls.pop(message.tool_call_id, None)
    results = [
        ToolResult(tool_call_id=call.id, name=call.name, ok=False, error=error)
        for call in open_calls.values()
    ]
    await insert_messages(w, results)
    # Calls cut short while running were executed (in part): audited; ones awaiting approval not.
    running = set(
        await w.session.scalars(
            select(ToolExecution.tool_call_id).where(
                ToolExecution.run_id == w.run.id, ToolExecution.status == "started"
            )
        )
        if open_calls
        else ()
    )
    events: list[RunEvent] = []
    for call in open_calls.values():
        row = (
            await w.session.execute(
                update(ToolExecution)
                .where(
                    ToolExecution.run_id == w.run.id,
                    ToolExecution.tool_call_id == call.id,
                    ToolExecution.status.in_(("started", "awaiting_approval")),
                )
                .values(status="failed", error={"message": error}, finished_at=func.now())
                .returning(ToolExecution.id, execution_ms())
            )
        ).one_or_none()
        execution_id = None if row is None else row[0]
        if row is not None and call.id in running:
            await tool_executed(
                w.session,
                w.run.principal,
                run_id=w.run.id,
                execution_id=execution_id,
                tool_call_id=call.id,
                name=call.name,
                args=call.args,
                outcome="failed",
                duration_ms=row[1],
            )
        events.append(
            ToolFailedEvent(
                tool_call_id=call.id, name=call.name, error=error, execution_id=execution_id
            )
        )
    return events


async def finish_cancelled(leased: LeasedRun) -> None:
    """Finish the run `cancelled`, with a failed result for each call it left without one."""
    await leased.finish("cancelled", error=CANCELLED, closing=close_open_calls)
