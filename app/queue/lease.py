"""Fenced writes of a claimed run: every transaction first proves the lease is still ours.

A worker that stalls past its lease (GC pause, frozen VM, network partition) may wake up after
another worker took the run over. Each write here starts with `fence_and_allocate`, which
matches (run, lease owner, attempt): a stale worker's write matches nothing and raises
`LeaseLostError` instead of interleaving with the new owner's transcript.

The tool-call writes live in `tool_calls.py` and the context-management writes (compaction
snapshots, memory flushes, context usage) in `context_writes.py` (mixins); `park_for_approval`
hands the worker's slot back while a tool call waits for a human (see `app/tools/approvals.py`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from sqlalchemy import or_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.errors import LeaseLostError
from app.core.tokens import estimate_message_tokens
from app.core.transcript import (
    AssistantMessage,
    ToolCall,
    ToolResult,
    UserMessage,
    dump_message,
    load_message,
    role_of,
)
from app.db.engine import Database
from app.db.models import AgentSession, Run, SessionMessage
from app.queue.event_log import EventSpec, insert_events
from app.queue.manager import ClaimedRun
from app.queue.sql import query
from app.runtime import events as ev
from app.runtime.compaction_store import ContextWrites
from app.runtime.tool_records import ToolCallWrites
from app.tools.approvals import ApprovalRequest, insert_pending

Message = UserMessage | AssistantMessage | ToolResult


class _CancelFirst(Exception):
    """Rolls back a parking transaction: a cancel was requested."""


@dataclass(slots=True)
class FencedWrite:
    """An open fenced transaction: the session and whether a cancel was requested."""

    session: AsyncSession
    cancel_requested: bool


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A transcript row: its per-session sequence number, parsed message and estimated tokens."""

    seq: int
    run_id: UUID | None
    message: Message
    tokens: int | None = None


class LeasedRun(ToolCallWrites, ContextWrites):
    """Data access for one claimed run, on behalf of its tenant, fenced by its lease."""

    def __init__(self, db: Database, claimed: ClaimedRun, worker_id: str) -> None:
        self.db = db
        self.run = claimed
        self.worker_id = worker_id

    @asynccontextmanager
    async def write(self, events: Sequence[EventSpec] = ()) -> AsyncIterator[FencedWrite]:
        """A fenced tenant transaction; `events` are appended in it, after the body succeeds."""
        async with self.db.tenant(self.run.principal) as s:
            row = (
                await s.execute(
                    query("fence_and_allocate"),
                    {
                        "run_id": self.run.id,
                        "worker_id": self.worker_id,
                        "attempt": self.run.attempt,
                        "n": len(events),
                    },
                )
            ).one_or_none()
            if row is None:
                raise LeaseLostError(f"lease on run {self.run.id} lost")
            yield FencedWrite(session=s, cancel_requested=row.cancel_requested)
            await insert_events(
                s,
                run_id=self.run.id,
                tenant_id=self.run.tenant_id,
                last_seq=row.last_event_seq,
                events=events,
            )

    async def emit(self, type_: str, data: dict[str, Any] | None = None) -> bool:
        """Store one event; returns whether a cancel has been requested."""
        async with self.write([(type_, data or {})]) as w:
            return w.cancel_requested

    async def set_state(self, state: str | None) -> None:
        """Record the loop's current state (shown in /status)."""
        async with self.write() as w:
            await w.session.execute(update(Run).where(Run.id == self.run.id).values(state=state))

    async def load_transcript(self, after_seq: int = 0) -> list[StoredMessage]:
        """The session's transcript after row `after_seq` (rows a compaction summary covers need
        not be read), plus every row of this run, in order."""
        async with self.db.tenant(self.run.principal) as s:
            rows = await s.execute(
                select(
                    SessionMessage.seq,
                    SessionMessage.run_id,
                    SessionMessage.payload,
                    SessionMessage.token_count,
                )
                .where(
                    SessionMessage.session_id == self.run.session_id,
                    or_(SessionMessage.seq > after_seq, SessionMessage.run_id == self.run.id),
                )
                .order_by(SessionMessage.seq)
            )
            return [
                StoredMessage(r.seq, r.run_id, load_message(r.payload), r.token_count) for r in rows
            ]

    async def append(
        self, messages: Sequence[Message], events: Sequence[EventSpec] = ()
    ) -> list[int]:
        """Append transcript rows (and events) in one fenced transaction; returns their seqs."""
        async with self.write(events) as w:
            return await self._insert_messages(w.session, messages)

    async def _insert_messages(self, s: AsyncSession, messages: Sequence[Message]) -> list[int]:
        if not messages:
            return []
        tokens = [estimate_message_tokens(m) for m in messages]
        last = await s.scalar(
            update(AgentSession)
            .where(AgentSession.id == self.run.session_id)
            .values(
                message_count=AgentSession.message_count + len(messages),
                token_count=AgentSession.token_count + sum(tokens),
            )
            .returning(AgentSession.message_count)
        )
        assert last is not None
        first = last - len(messages) + 1
        await s.execute(
            insert(SessionMessage),
            [
                {
                    "tenant_id": self.run.tenant_id,
                    "session_id": self.run.session_id,
                    "run_id": self.run.id,
                    "seq": first + i,
                    "role": role_of(m),
                    "payload": dump_message(m),
                    "token_count": tokens[i],
                }
                for i, m in enumerate(messages)
            ],
        )
        return list(range(first, last + 1))

    async def add_usage(
        self,
        input_tokens: int,
        output_tokens: int,
        events: Sequence[EventSpec] = (),
        *,
        context_window: int | None = None,
    ) -> None:
        """Add a model call's token usage to the run. With `context_window`, the call's input was
        the conversation's context, sized for that window: its input tokens are also the run's
        and session's current context size."""
        async with self.write(events) as w:
            values: dict[str, Any] = {
                "input_tokens": Run.input_tokens + input_tokens,
                "output_tokens": Run.output_tokens + output_tokens,
            }
            if context_window is not None:
                values.update(context_tokens=input_tokens, context_window=context_window)
                await w.session.execute(
                    update(AgentSession)
                    .where(AgentSession.id == self.run.session_id)
                    .values(context_tokens=input_tokens)
                )
            await w.session.execute(update(Run).where(Run.id == self.run.id).values(**values))

    async def park_for_approval(self, request: ApprovalRequest) -> bool:
        """Park the run until `request` is decided: the pending approval, status
        `awaiting_approval` with the lease cleared, and `approval.required`, atomically.

        Returns False (and changes nothing) when a cancel was requested first: the caller
        finishes the run cancelled instead. The fence locks the run row, so no cancel request
        can slip in between the check and the parking.
        """
        try:
            async with self.write([(ev.APPROVAL_REQUIRED, request.event_data())]) as w:
                if w.cancel_requested:
                    raise _CancelFirst
                await insert_pending(w.session, self.run, request)
                call = ToolCall(id=request.tool_call_id, name=request.tool, args=request.args)
                await self._upsert_execution(
                    w.session,
                    call,
                    {"status": "awaiting_approval"},
                    approval_id=request.approval_id,
                )
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

    async def finish(
        self,
        status: str,
        *,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        """End the run (completed/failed/cancelled) with its terminal event, atomically."""
        if status == "completed":
            event: EventSpec = (ev.RUN_COMPLETED, {"result": result})
        elif status == "failed":
            event = (ev.RUN_FAILED, {"error": error})
        else:
            event = (ev.RUN_CANCELLED, {"reason": (error or {}).get("message", "cancelled")})
        async with self.write([event]) as w:
            finished = await w.session.scalar(
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
            if finished is None:
                raise LeaseLostError(f"lease on run {self.run.id} lost")

    async def hand_back(self) -> None:
        """Return the run to the head of its lane (graceful shutdown) with a `run.requeued` event."""
        async with self.write([(ev.RUN_REQUEUED, {"attempt": self.run.attempt})]) as w:
            await w.session.execute(
                query("release_runs"), {"worker_id": self.worker_id, "run_ids": [self.run.id]}
            )
