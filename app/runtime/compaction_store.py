"""What context management stores for a session: compaction snapshots and the memory-flush mark
(written in fenced transactions of the run), and the read each attempt starts from. (The
context's size and window are recorded with each call's usage, `app.runtime.usage`.)

A compaction's snapshot row, the run's and session's compaction counts and its
`context.compacted` event are written in one transaction, so a compaction is either wholly stored
or not at all: a failure before that leaves the session exactly as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from sqlalchemy import update
from sqlalchemy.dialects.postgresql import insert

from app.core.events import ContextCompactedEvent, MemoryFlushedEvent
from app.db.models import AgentSession, ContextSnapshot, Run
from app.queue.lease import LeasedRun


@dataclass(frozen=True, slots=True)
class SessionContext:
    """What a run needs to know about its session's context before its first call."""

    summary: str | None
    """The latest compaction summary (None: never compacted)."""
    first_seq: int
    last_seq: int
    """The transcript rows the summary stands for (0, 0 without one)."""
    flushed_through: int
    """Rows up to this seq were already offered for a memory flush."""


@dataclass(frozen=True, slots=True)
class Compaction:
    """A compaction to store: the summary and what it replaced."""

    id: UUID
    summary: str
    first_seq: int
    last_seq: int
    messages_covered: int
    tokens_before: int
    tokens_after: int
    summary_tokens: int
    model: str


async def store_compaction(
    leased: LeasedRun, compaction: Compaction, event: ContextCompactedEvent
) -> None:
    """Store a compaction snapshot with its event, counting it for the run and the session."""
    async with leased.write([event]) as w:
        await w.session.execute(
            insert(ContextSnapshot).values(
                id=compaction.id,
                tenant_id=leased.run.tenant_id,
                session_id=leased.run.session_id,
                run_id=leased.run.id,
                summary=compaction.summary,
                first_message_seq=compaction.first_seq,
                last_message_seq=compaction.last_seq,
                messages_covered=compaction.messages_covered,
                tokens_before=compaction.tokens_before,
                tokens_after=compaction.tokens_after,
                summary_tokens=compaction.summary_tokens,
                model=compaction.model,
            )
        )
        await w.session.execute(
            update(Run).where(Run.id == leased.run.id).values(compactions=Run.compactions + 1)
        )
        await w.session.execute(
            update(AgentSession)
            .where(AgentSession.id == leased.run.session_id)
            .values(compactions=AgentSession.compactions + 1)
        )


async def mark_flushed(leased: LeasedRun, through_seq: int, event: MemoryFlushedEvent) -> None:
    """Rows up to `through_seq` were offered for a memory flush (never offered again)."""
    async with leased.write([event]) as w:
        await w.session.execute(
            update(AgentSession)
            .where(
                AgentSession.id == leased.run.session_id,
                AgentSession.memory_flushed_through_seq < through_seq,
            )
            .values(memory_flushed_through_seq=through_seq)
        )
