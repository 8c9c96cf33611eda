"""The run event log: appending typed events to `run_events` and reading them back in order.

Rows keep the event's `type` and its own fields as `data` (`app.core.events.event_data`); the
envelope (`runId`, `seq`, `ts`) comes from the row's columns when it is read back.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.events import RunEvent, event_data_json, stored_event
from app.db.models import Run
from app.db.models import RunEvent as RunEventRow
from app.queue.sql import query


async def insert_events(
    session: AsyncSession,
    *,
    run_id: UUID,
    tenant_id: str,
    last_seq: int,
    events: Sequence[RunEvent],
) -> None:
    """Insert `events` numbered so that the last one gets `last_seq` (seqs reserved by the caller),
    in one statement (one NOTIFY: migration 0021)."""
    if not events:
        return
    first = last_seq - len(events) + 1
    await session.execute(
        query("insert_events"),
        {
            "tenant_id": tenant_id,
            "run_id": run_id,
            "first_seq": first,
            "types": [event.type for event in events],
            "data": [event_data_json(event) for event in events],
        },
    )


async def events_after(
    session: AsyncSession, run_id: UUID, after_seq: int, limit: int = 500
) -> list[RunEvent]:
    """Stored events of a run with `seq > after_seq`, in order, with their envelope."""
    rows = await session.scalars(
        select(RunEventRow)
        .where(RunEventRow.run_id == run_id, RunEventRow.seq > after_seq)
        .order_by(RunEventRow.seq)
        .limit(limit)
    )
    return [
        stored_event(type_=r.type, data=r.data, run_id=r.run_id, seq=r.seq, ts=r.created_at)
        for r in rows
    ]


async def run_status(session: AsyncSession, run_id: UUID) -> str | None:
    """The run's status; None when the session's tenant (RLS) cannot see such a run."""
    status: str | None = await session.scalar(select(Run.status).where(Run.id == run_id))
    return status


async def emit_unleased(
    session: AsyncSession, run_id: UUID, tenant_id: str, events: list[RunEvent]
) -> None:
    """Append events to a run that no worker holds (API side: queued, cancelled)."""
    row = (await session.execute(query("allocate_seq"), {"run_id": run_id, "n": len(events)})).one()
    await insert_events(
        session, run_id=run_id, tenant_id=tenant_id, last_seq=row.last_event_seq, events=events
    )
