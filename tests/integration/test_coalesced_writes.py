"""Deferred writes of a running run (`LeasedRun.defer`, `app.queue.coalesce`): stored in order with
the run's next write or by the flusher, several runs in one transaction, never past a lost lease."""

from __future__ import annotations

import asyncio
from uuid import UUID

import pytest
from sqlalchemy import text, update

from app.auth.principal import Principal
from app.core.errors import LeaseLostError
from app.core.events import AssistantDeltaEvent, RunCompletedEvent, StateChangedEvent
from app.db.engine import Database
from app.db.models import Run
from app.queue.coalesce import FLUSH_SECONDS, flusher_for
from app.queue.lease import FencedWrite, LeasedRun, RowWrites
from app.queue.manager import RunQueue

ROWS = text(
    "SELECT seq, type, data->>'text' AS text, xmin::text::bigint AS tx FROM run_events "
    "WHERE run_id = :run_id ORDER BY seq"
)


async def _leased(database: Database, principal: Principal, key: str, worker: str) -> LeasedRun:
    queue = RunQueue(database)
    await queue.enqueue_run(principal, message="hi", session_key=key)
    claimed = await queue.claim_next(worker, 30)
    assert claimed is not None
    return LeasedRun(database, claimed, worker)


async def _rows(database: Database, run_id: UUID) -> list[tuple[int, str, str | None, int]]:
    """The run's events (seq, type, text, inserting transaction): [2:] skips run.queued and the
    claim's run.started."""
    async with database.owner() as s:
        return [(r.seq, r.type, r.text, r.tx) for r in await s.execute(ROWS, {"run_id": run_id})]


async def test_deferred_writes_ride_with_the_next_write_first_and_in_order(
    database: Database, alice: Principal
) -> None:
    leased = await _leased(database, alice, "s1", "w1")

    async def state(w: FencedWrite) -> None:
        await w.session.execute(update(Run).where(Run.id == leased.run.id).values(state="x"))

    leased.defer([AssistantDeltaEvent(text="a")])
    leased.defer([StateChangedEvent(from_="queued", to="thinking")], state)
    leased.defer([AssistantDeltaEvent(text="b")])
    await leased.emit(AssistantDeltaEvent(text="c"))  # before the flusher's interval ends
    rows = await _rows(database, leased.run.id)
    assert [(r[1], r[2]) for r in rows[2:]] == [
        ("assistant.delta", "a"),
        ("state.changed", None),
        ("assistant.delta", "b"),
        ("assistant.delta", "c"),
    ]
    assert [r[0] for r in rows] == list(
        range(1, len(rows) + 1)
    )  # no gap after run.queued and the claim's run.started
    assert len({r[3] for r in rows[2:]}) == 1  # one transaction
    async with database.owner() as s:
        state_now = await s.scalar(
            text("SELECT state FROM agent_run_queue WHERE id = :id"), {"id": leased.run.id}
        )
    assert state_now == "x"
    assert not leased.has_deferred()


async def test_the_flusher_stores_several_runs_deferred_writes_in_one_transaction(
    database: Database, alice: Principal, mallory: Principal
) -> None:
    runs = [
        await _leased(database, alice, "f1", "w1"),
        await _leased(database, alice, "f2", "w1"),
        await _leased(database, mallory, "f3", "w1"),  # another tenant, same transaction
    ]
    for i, leased in enumerate(runs):
        leased.defer([AssistantDeltaEvent(text=f"d{i}")])
    await asyncio.sleep(FLUSH_SECONDS * 6)
    stored = [await _rows(database, leased.run.id) for leased in runs]
    assert [[r[2] for r in rows[2:]] for rows in stored] == [["d0"], ["d1"], ["d2"]]
    assert len({rows[-1][3] for rows in stored}) == 1
    async with database.tenant(mallory) as s:  # RLS: each run's events are its tenant's
        seen = await s.execute(text("SELECT DISTINCT tenant_id FROM run_events"))
        assert [r[0] for r in seen] == [mallory.tenant_id]


async def test_a_run_whose_lease_was_lost_loses_its_deferred_writes_and_learns_it(
    database: Database, alice: Principal
) -> None:
    leased = await _leased(database, alice, "l1", "w1")
    keep = await _leased(database, alice, "l2", "w1")
    async with database.owner() as s:  # another worker took the run over
        await s.execute(
            text("UPDATE agent_run_queue SET lease_owner = 'w2' WHERE id = :id"),
            {"id": leased.run.id},
        )
    leased.defer([AssistantDeltaEvent(text="stale")])
    keep.defer([AssistantDeltaEvent(text="fresh")])
    await flusher_for(database).flush([leased, keep])
    assert [r[2] for r in (await _rows(database, leased.run.id))[2:]] == []
    assert [r[2] for r in (await _rows(database, keep.run.id))[2:]] == ["fresh"]
    with pytest.raises(LeaseLostError):
        leased.defer([AssistantDeltaEvent(text="more")])


async def test_a_failed_write_keeps_the_deferred_writes_for_the_next(
    database: Database, alice: Principal
) -> None:
    leased = await _leased(database, alice, "r1", "w1")
    leased.defer([AssistantDeltaEvent(text="kept")])
    with pytest.raises(RuntimeError):
        async with leased.write([AssistantDeltaEvent(text="rolled back")]):
            raise RuntimeError("the body failed")
    assert leased.has_deferred()
    await leased.finish("completed", result={"text": "ok"})
    rows = await _rows(database, leased.run.id)
    assert [(r[1], r[2]) for r in rows[2:]] == [
        ("assistant.delta", "kept"),
        (RunCompletedEvent(result=None).type, None),
    ]


async def test_only_the_last_of_rows_that_replace_each_other_is_written(
    database: Database, alice: Principal
) -> None:
    leased = await _leased(database, alice, "p1", "w1")
    ran: list[str] = []

    def state(value: str) -> RowWrites:
        async def rows(w: FencedWrite) -> None:
            ran.append(value)
            await w.session.execute(update(Run).where(Run.id == leased.run.id).values(state=value))

        return rows

    leased.defer(
        [StateChangedEvent(from_="queued", to="thinking")], state("thinking"), replaces="state"
    )
    leased.defer(rows=state("other"))  # no key: always written
    leased.defer(
        [StateChangedEvent(from_="thinking", to="responding")],
        state("responding"),
        replaces="state",
    )
    await leased.emit(AssistantDeltaEvent(text="x"))
    assert ran == ["other", "responding"]
    types = [r[1] for r in await _rows(database, leased.run.id)]
    assert types.count("state.changed") == 2  # every event is kept
