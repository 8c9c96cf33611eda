"""The session transcript as a run reads and writes it: `session_messages` rows (`Entry`), loaded
when an attempt starts and appended inside a fenced transaction of the run.

Appending keeps the session's counters (`message_count`, which numbers the rows, and
`token_count`) in the same transaction as the rows, so rows are numbered 1, 2, … without gaps.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from app.core.events import RunEvent
from app.core.tokens import estimate_message_tokens
from app.core.transcript import Message, dump_message, load_message, role_of
from app.queue.lease import FencedWrite, LeasedRun
from app.runtime.statements import APPEND_MESSAGES, TRANSCRIPT


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
    params = {"session_id": run.session_id, "after_seq": after_seq, "run_id": run.id}
    async with leased.db.tenant(run.principal) as s:
        rows = await s.execute(TRANSCRIPT, params)
        return [
            Entry(r.run_id, load_message(r.payload), seq=r.seq, tokens=r.token_count) for r in rows
        ]


async def insert_messages(w: FencedWrite, messages: Sequence[Message]) -> list[int]:
    """Append `messages` as the session's next rows in the fenced transaction `w`; their seqs."""
    if not messages:
        return []
    run = w.run
    tokens = [estimate_message_tokens(m) for m in messages]
    seqs = await w.session.scalars(
        APPEND_MESSAGES,
        {
            "n": len(messages),
            "tokens": sum(tokens),
            "session_id": run.session_id,
            "tenant_id": run.tenant_id,
            "run_id": run.id,
            "roles": [role_of(m) for m in messages],
            "payloads": [json.dumps(dump_message(m)) for m in messages],
            "token_counts": tokens,
        },
    )
    found = sorted(seqs)
    assert len(found) == len(messages), "the session row is missing"
    return found


async def append_messages(
    leased: LeasedRun, messages: Sequence[Message], events: Sequence[RunEvent] = ()
) -> list[int]:
    """Append transcript rows (and events) in one fenced transaction; returns their seqs."""
    async with leased.write(events) as w:
        return await insert_messages(w, messages)
