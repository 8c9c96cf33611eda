"""The session transcript as a run reads and writes it: `session_messages` rows (`Entry`), loaded
when an attempt starts and appended inside a fenced transaction of the run.

Appending keeps the session's counters (`message_count`, which numbers the rows, and
`token_count`) in the same transaction as the rows, so rows are numbered 1, 2, … without gaps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from sqlalchemy import or_, select, update
from sqlalchemy.dialects.postgresql import insert

from app.core.events import RunEvent
from app.core.tokens import estimate_message_tokens
from app.core.transcript import Message, dump_message, load_message, role_of
from app.db.models import AgentSession, SessionMessage
from app.queue.lease import FencedWrite, LeasedRun


@dataclass(frozen=True, slots=True)
class Entry:
    """A transcript entry, the run that wrote it (None: imported/older rows) and its seq."""

    run_id: UUID | None
    message: Message
    seq: int = 0
    """Its `session_messages.seq` (1, 2, … per session, without gaps)."""
    tokens: int | None = None
    """Its estimated tokens (`session_messages.token_count`), if known."""


async def load_transcript(leased: LeasedRun, after_seq: int = 0) -> list[Entry]:
    """The session's transcript after row `after_seq` (rows a compaction summary covers need not
    be read), plus every row of this run, in order."""
    run = leased.run
    async with leased.db.tenant(run.principal) as s:
        rows = await s.execute(
            select(
                SessionMessage.seq,
                SessionMessage.run_id,
                SessionMessage.payload,
                SessionMessage.token_count,
            )
            .where(
                SessionMessage.session_id == run.session_id,
                or_(SessionMessage.seq > after_seq, SessionMessage.run_id == run.id),
            )
            .order_by(SessionMessage.seq)
        )
        return [
            Entry(r.run_id, load_message(r.payload), seq=r.seq, tokens=r.token_count) for r in rows
        ]


async def insert_messages(w: FencedWrite, messages: Sequence[Message]) -> list[int]:
    """Append `messages` as the session's next rows in the fenced transaction `w`; their seqs."""
    if not messages:
        return []
    run = w.run
    tokens = [estimate_message_tokens(m) for m in messages]
    last = await w.session.scalar(
        update(AgentSession)
        .where(AgentSession.id == run.session_id)
        .values(
            message_count=AgentSession.message_count + len(messages),
            token_count=AgentSession.token_count + sum(tokens),
        )
        .returning(AgentSession.message_count)
    )
    assert last is not None
    first = last - len(messages) + 1
    await w.session.execute(
        insert(SessionMessage),
        [
            {
                "tenant_id": run.tenant_id,
                "session_id": run.session_id,
                "run_id": run.id,
                "seq": first + i,
                "role": role_of(m),
                "payload": dump_message(m),
                "token_count": tokens[i],
            }
            for i, m in enumerate(messages)
        ],
    )
    return list(range(first, last + 1))


async def append_messages(
    leased: LeasedRun, messages: Sequence[Message], events: Sequence[RunEvent] = ()
) -> list[int]:
    """Append transcript rows (and events) in one fenced transaction; returns their seqs."""
    async with leased.write(events) as w:
        return await insert_messages(w, messages)
