"""The event hub's shared read: new events of many live runs in one statement.

Every SSE stream of a run used to read `run_events` for itself on each wake-up (a tenant
transaction per stream per event). The hub instead reads, once per batch of notifications, the
events after each run's last read seq for every notified run at once, with each run's status in
the same snapshot (a terminal or missing status with nothing new means the stream is over), and
hands each run's rows to that run's streams only.

The statement covers runs of many tenants, so it runs on a connection of its own as the
connecting role, which must bypass row-level security (the superuser of the embedded server,
`postgres` on Supabase); `SharedReader.connect` checks that and says so when it does not, and the
hub then lets each stream read under its own RLS principal as before. Isolation does not rest
on RLS here but on two rules the hub keeps: a run is read only for streams that already read it
under their own principal (`Subscription.go_live`), and rows go only to that run's streams.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import asyncpg

from app.core.events import RunEvent, stored_event
from app.db.urls import asyncpg_dsn

PER_RUN = 200
"""Events read per run and statement (a run with more is read again at once)."""

_READ = """
SELECT w.run_id, q.status, e.seq, e.type, e.data, e.created_at
FROM unnest($1::uuid[], $2::bigint[]) AS w(run_id, after)
LEFT JOIN agent_run_queue q ON q.id = w.run_id
LEFT JOIN LATERAL (
  SELECT r.seq, r.type, r.data, r.created_at FROM run_events r
  WHERE r.run_id = w.run_id AND r.seq > w.after ORDER BY r.seq LIMIT $3
) e ON true
ORDER BY w.run_id, e.seq
"""

_BYPASSES_RLS = "SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"


@dataclass(slots=True)
class RunRead:
    """What one shared read found for one run."""

    status: str | None
    """The run's status (None: no such run any more)."""
    events: list[RunEvent] = field(default_factory=list)
    """Its events after the position asked for, in seq order (at most `PER_RUN`)."""


class NotPermittedError(Exception):
    """The connecting role is subject to row-level security: it cannot read across tenants."""


class SharedReader:
    """One connection reading new events for many runs at once."""

    def __init__(self, database_url: str) -> None:
        self._dsn = asyncpg_dsn(database_url)
        self._conn: Any = None

    async def connect(self) -> None:
        """Open the connection (if needed); `NotPermittedError` when its role cannot bypass RLS."""
        if self._conn is not None and not self._conn.is_closed():
            return
        conn = await asyncpg.connect(self._dsn)
        try:
            if not await conn.fetchval(_BYPASSES_RLS):
                raise NotPermittedError(
                    "the database role does not bypass row-level security: each stream reads "
                    "its run's events itself"
                )
        except BaseException:
            conn.terminate()
            raise
        self._conn = conn

    async def read(self, positions: dict[UUID, int]) -> dict[UUID, RunRead]:
        """For each run, its status and its events after the given seq."""
        await self.connect()
        run_ids = list(positions)
        try:
            rows = await self._conn.fetch(_READ, run_ids, [positions[r] for r in run_ids], PER_RUN)
        except BaseException:
            self.close()  # a broken connection is reopened by the next read
            raise
        return _group(rows)

    def close(self) -> None:
        """Drop the connection (at once: it may be mid-statement)."""
        if self._conn is not None:
            self._conn.terminate()
            self._conn = None


def _group(rows: Sequence[Any]) -> dict[UUID, RunRead]:
    found: dict[UUID, RunRead] = {}
    for run_id, status, seq, type_, data, created_at in rows:
        read = found.get(run_id)
        if read is None:
            read = found[run_id] = RunRead(status=status)
        if seq is not None:
            read.events.append(
                stored_event(
                    type_=type_,
                    data=json.loads(data) if isinstance(data, str) else data,
                    run_id=run_id,
                    seq=seq,
                    ts=created_at,
                )
            )
    return found
