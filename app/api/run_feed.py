"""Following a run's stored events: replayed from a seq, then live, until a terminal event.

A stream first reads the run itself, under its own principal (RLS): "read events after the last
one sent; send them; stop after a terminal event" until it has caught up. Then it goes live: the
event hub (`app/api/event_hub.py`) reads the run's new events once for every stream of it and
hands them over; the stream skips any seq it already sent and reads for itself again whenever the
hub asks it to (a gap, the run's end, the hub unable to read) or, without the hub, on each
wake-up or poll. Seqs decide what comes next, so nothing is lost or sent twice at the
replay/live boundary. Every framing reads runs through here: the SSE replay (`routes/stream.py`)
and the stream adapters (`app/api/adapters/`, e.g. the AI SDK's UI message stream in
`routes/chat.py`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import UUID

from sqlalchemy import select

from app.api.deps import Runtime
from app.api.event_hub import IDLE_SECONDS
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
    hub = runtime.hub
    last = after_seq
    with (
        metrics.SSE_CONNECTIONS.track_inprogress(),
        hub.subscribe(run_id) as sub,  # before the first read: no wake-up is missed
    ):
        must_read = True
        while True:
            if must_read or not hub.shared:
                status, events = await _read(runtime, principal, run_id, last)
                if not events and (status is None or status in TERMINAL_STATUSES):
                    return  # finished (its terminal event is at or before `last`) or gone
                must_read = len(events) == BATCH  # more backlog: read on without waiting
            else:
                events, must_read = sub.take()
                events = [e for e in events if e.seq is not None and e.seq > last]
                if events and events[0].seq != last + 1:
                    events, must_read = [], True  # a gap (e.g. a second stream joined late)
            for event in events:
                yield event
                assert event.seq is not None  # stored events have their envelope
                last = event.seq
                if event.type in TERMINAL_EVENTS:
                    return
            if must_read:
                continue
            if not sub.live:
                hub.go_live(sub, last)  # caught up under the principal: the hub may serve it
            if hub.shared:
                must_read = not await sub.wait(IDLE_SECONDS)
            else:
                await sub.wait(hub.poll_seconds)
                sub.take()
                must_read = True


async def _read(
    runtime: Runtime, principal: Principal, run_id: UUID, after: int
) -> tuple[str | None, list[RunEvent]]:
    """The run's status and its events after `after`, under the principal's RLS."""
    async with runtime.db.tenant(principal) as s:
        # Status first: a terminal status read here guarantees that the events read next (a
        # later snapshot) include the terminal event committed with it.
        status = await s.scalar(select(Run.status).where(Run.id == run_id))
        events = await events_after(s, run_id, after, limit=BATCH)
    return status, events
