"""Following a run's stored events: replayed from a seq, then live, until a terminal event.

One loop serves both phases — "read events after the last one sent; send them; stop after a
terminal event; else wait for a wake-up or the fallback poll" — so nothing is lost or sent
twice at the replay/live boundary: the database, not the notification, decides what comes next.
Every framing reads runs through here: the SSE replay (`routes/stream.py`) and the stream
adapters (`app/api/adapters/`, e.g. the AI SDK's UI message stream in `routes/chat.py`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import UUID

from sqlalchemy import select

from app.api.deps import Runtime
from app.auth.principal import Principal
from app.core.events import TERMINAL_EVENTS, RunEvent
from app.core.state_machine import TERMINAL_STATUSES
from app.db.models import Run
from app.observability import metrics
from app.queue.event_log import events_after

BATCH = 200


async def follow_run(
    runtime: Runtime, principal: Principal, run_id: UUID, after_seq: int
) -> AsyncIterator[RunEvent]:
    """The stored events of `run_id` after `after_seq`, in order, ending after a terminal one
    (or when the run is gone). Counted as an open event stream while it runs."""
    last = after_seq
    with (
        metrics.SSE_CONNECTIONS.track_inprogress(),
        runtime.hub.subscribe(run_id) as wakeup,  # before the first read: no wake-up is missed
    ):
        while True:
            async with runtime.db.tenant(principal) as s:
                # Status first: a terminal status read here guarantees that the events read
                # next (a later snapshot) include the terminal event committed with it.
                status = await s.scalar(select(Run.status).where(Run.id == run_id))
                events = await events_after(s, run_id, last, limit=BATCH)
            for event in events:
                yield event
                assert event.seq is not None  # stored events have their envelope
                last = event.seq
                if event.type in TERMINAL_EVENTS:
                    return
            if len(events) == BATCH:
                continue  # more backlog: read on without waiting
            if not events and (status is None or status in TERMINAL_STATUSES):
                return  # finished (its terminal event is at or before `last`) or gone
            await wakeup.wait(runtime.hub.poll_seconds)
