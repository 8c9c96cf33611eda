"""Fenced writes of tool calls (a mixin of `LeasedRun`): started, finished, refused.

A call is recorded as started (`tool.started`, a `tool_executions` row) before it runs, and its
result is stored with its `tool.completed`/`tool.failed` event in one transaction after it. A
call that is not executed (policy, cap, denied approval) is stored failed in one transaction.

Every `tool.*` event carries `executionId`, the id of the call's `tool_executions` row (one per
run and call, kept across retries and approvals), so clients can join the stream with
`GET /runs/{runId}/tools`. The id is known only once the row is written, inside the same fenced
transaction; `LeasedRun.write` appends its events after the body, so the body fills it in.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from sqlalchemy import case, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage
from app.db.models import ToolExecution
from app.queue.event_log import EventSpec
from app.queue.manager import ClaimedRun
from app.runtime import events as ev

if TYPE_CHECKING:
    from app.queue.lease import FencedWrite


@dataclass(frozen=True, slots=True)
class ToolAttempt:
    """What the store knew about a tool call before this attempt started."""

    previous_status: str | None  # None: never started before

    @property
    def interrupted(self) -> bool:
        """A previous attempt started the call and died before recording its outcome."""
        return self.previous_status == "started"


class ToolCallWrites:
    """The tool-call verbs of `LeasedRun` (which provides `write` and `_insert_messages`)."""

    run: ClaimedRun
    worker_id: str

    if TYPE_CHECKING:

        def write(
            self, events: Sequence[EventSpec] = ()
        ) -> AbstractAsyncContextManager[FencedWrite]: ...

        async def _insert_messages(
            self, s: AsyncSession, messages: Sequence[UserMessage | AssistantMessage | ToolResult]
        ) -> list[int]: ...

    async def tool_started(
        self, call: ToolCall, *, approval_id: UUID | None = None, purpose: str | None = None
    ) -> ToolAttempt:
        """Record that `call` is about to execute and emit `tool.started` (with `purpose`, if
        given: a housekeeping call such as a memory flush, not a turn of the conversation)."""
        data: dict[str, Any] = {"toolCallId": call.id, "name": call.name, "args": call.args}
        if purpose is not None:
            data["purpose"] = purpose
        async with self.write([(ev.TOOL_STARTED, data)]) as w:
            previous = await w.session.scalar(
                select(ToolExecution.status).where(
                    ToolExecution.run_id == self.run.id, ToolExecution.tool_call_id == call.id
                )
            )
            data["executionId"] = await self._upsert_execution(
                w.session,
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

    async def _upsert_execution(
        self,
        s: AsyncSession,
        call: ToolCall,
        values: dict[str, Any],
        *,
        approval_id: UUID | None = None,
        on_conflict: dict[str, Any] | None = None,
    ) -> str:
        """Insert the call's `tool_executions` row with `values`, or update it with them (and
        `on_conflict`); the worker is this one, the approval is kept unless a new one is given.
        Returns the row's id (as in events)."""
        stmt = insert(ToolExecution).values(
            tenant_id=self.run.tenant_id,
            run_id=self.run.id,
            session_id=self.run.session_id,
            tool_call_id=call.id,
            name=call.name,
            args=call.args,
            worker_id=self.worker_id,
            approval_id=approval_id,
            **values,
        )
        approval = func.coalesce(stmt.excluded.approval_id, ToolExecution.approval_id)
        execution_id = await s.scalar(
            stmt.on_conflict_do_update(
                constraint="tool_executions_run_call_key",
                set_={
                    "worker_id": self.worker_id,
                    "approval_id": approval,
                    **values,
                    **(on_conflict or {}),
                },
            ).returning(ToolExecution.id)
        )
        assert execution_id is not None
        return str(execution_id)

    async def tool_refused(
        self, call: ToolCall, error: str, *, approval_id: UUID | None = None
    ) -> ToolResult:
        """Store a call that is not executed (policy, cap, denial) as failed, with its event."""
        result = ToolResult(tool_call_id=call.id, name=call.name, ok=False, error=error)
        data: dict[str, Any] = {"toolCallId": call.id, "name": call.name, "error": error}
        async with self.write([(ev.TOOL_FAILED, data)]) as w:
            await self._insert_messages(w.session, [result])
            data["executionId"] = await self._upsert_execution(
                w.session,
                call,
                {"status": "failed", "error": {"message": error}, "finished_at": func.now()},
                approval_id=approval_id,
            )
        return result

    async def tool_finished(
        self,
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
        data: dict[str, Any] = {"toolCallId": result.tool_call_id, "name": result.name}
        if purpose is not None:
            data["purpose"] = purpose
        if result.ok:
            event: EventSpec = (ev.TOOL_COMPLETED, {**data, "result": result.result})
        else:
            event = (ev.TOOL_FAILED, {**data, "error": result.error})
        if interrupted:
            status = "interrupted"
        else:
            status = "completed" if result.ok else "failed"
        async with self.write([event]) as w:
            if in_transcript:
                await self._insert_messages(w.session, [result])
            execution_id = await w.session.scalar(
                update(ToolExecution)
                .where(
                    ToolExecution.run_id == self.run.id,
                    ToolExecution.tool_call_id == result.tool_call_id,
                )
                .values(
                    status=status,
                    result=result.result if result.ok else None,
                    error=None if result.ok else {"message": result.error},
                    finished_at=func.now(),
                )
                .returning(ToolExecution.id)
            )
            if execution_id is not None:  # always, for a call `tool_started` recorded
                event[1]["executionId"] = str(execution_id)
