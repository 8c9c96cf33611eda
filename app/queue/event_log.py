"""Appending and reading stored run events (the SSE backlog)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import RunEvent

EventSpec = tuple[str, dict[str, Any]]


async def insert_events(
    session: AsyncSession,
    *,
    run_id: UUID,
    tenant_id: str,
    last_seq: int,
    events: Sequence[EventSpec],
) -> None:
    """Insert `events` numbered so that the last one gets `last_seq` (seqs reserved by the caller)."""
    if not events:
        return
    first = last_seq - len(events) + 1
    await session.execute(
        insert(RunEvent),
        [
            {"tenant_id": tenant_id, "run_id": run_id, "seq": first + i, "type": t, "data": d}
            for i, (t, d) in enumerate(events)
        ],
    )


async def events_after(
    session: AsyncSession, run_id: UUID, after_seq: int, limit: int = 500
) -> list[RunEvent]:
    """Stored events of a run with `seq > after_seq`, in order."""
    rows = await session.scalars(
        select(RunEvent)
        .where(RunEvent.run_id == run_id, RunEvent.seq > after_seq)
        .order_by(RunEvent.seq)
        .limit(limit)
    )
    return list(rows)
