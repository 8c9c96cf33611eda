"""The lane-head table (queue_lanes, migration 0023) the claim reads: kept equal to what the runs
say by its trigger whoever changes a run, batched claims (one run per lane, fair across
tenants), and who may see it."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.auth.principal import Principal
from app.db.engine import Database
from app.db.urls import asyncpg_dsn
from app.queue.lease import LeasedRun
from app.queue.manager import RunQueue
from tests.integration.test_fair_claim import backlog, finish

pytestmark = pytest.mark.timeout(60)

DERIVED = text(
    """
    SELECT s.session_id, h.id AS head_id, h.not_before AS ready_at, s.busy
    FROM (SELECT session_id,
                 bool_or(status IN ('running', 'awaiting_approval', 'waiting')) AS busy
          FROM agent_run_queue
          WHERE status IN ('queued', 'running', 'awaiting_approval', 'waiting')
          GROUP BY session_id) s
    LEFT JOIN LATERAL (SELECT q.id, q.not_before FROM agent_run_queue q
                       WHERE q.session_id = s.session_id AND q.status = 'queued'
                       ORDER BY q.queue_seq LIMIT 1) h ON true
    ORDER BY 1
    """
)
STORED = text("SELECT session_id, head_id, ready_at, busy FROM queue_lanes ORDER BY 1")


async def assert_lanes_match(db: Database) -> None:
    """queue_lanes holds exactly the lanes the runs describe."""
    async with db.owner() as s:
        derived: list[Any] = [tuple(r) for r in await s.execute(DERIVED)]
        stored: list[Any] = [tuple(r) for r in await s.execute(STORED)]
    assert stored == derived


async def test_the_lanes_follow_every_change_of_a_run(database: Database, alice: Principal) -> None:
    queue = RunQueue(database, max_run_attempts=3)
    first = await queue.enqueue_run(alice, message="a", session_key="k")
    second = await queue.enqueue_run(alice, message="b", session_key="k")
    third = await queue.enqueue_run(alice, message="c", session_key="other")
    await assert_lanes_match(database)

    claimed = (await queue.claim_batch("w", 30, limit=8)).runs
    assert {c.id for c in claimed} == {first.run_id, third.run_id}  # one per lane: not `second`
    await assert_lanes_match(database)
    await finish(database, third.run_id)
    await assert_lanes_match(database)

    # the lease expires: back to the head of its lane, before `second`
    async with database.owner() as s:
        await s.execute(
            text(
                "UPDATE agent_run_queue SET lease_expires_at = now() - interval '1 s' "
                "WHERE id = :id"
            ),
            {"id": first.run_id},
        )
    assert first.run_id in await queue.recover_expired()
    await assert_lanes_match(database)
    again = await queue.claim_next("w2", 30)
    assert again is not None and again.id == first.run_id
    await LeasedRun(database, again, "w2").finish("completed", result={"text": "ok"})
    await assert_lanes_match(database)

    # a debounce window holds the head back; cancelling it moves the lane on
    async with database.owner() as s:
        await s.execute(
            text("UPDATE agent_run_queue SET not_before = now() + interval '1 h' WHERE id = :id"),
            {"id": second.run_id},
        )
    await assert_lanes_match(database)
    nothing = await queue.claim_batch("w", 30, limit=8)
    assert nothing.runs == [] and 3500 < (nothing.next_window or 0) <= 3600
    assert await queue.cancel(alice, second.run_id) == "cancelled"
    await assert_lanes_match(database)
    async with database.owner() as s:
        assert await s.scalar(text("SELECT count(*) FROM queue_lanes")) == 0
        await s.execute(text("DELETE FROM agent_sessions"))
    await assert_lanes_match(database)


async def test_racing_writers_of_one_lane_leave_it_right(database: Database) -> None:
    """Inserts, claims and finishes of one session's runs in concurrent transactions: the
    trigger locks the lane row before it reads the runs, so the last writer sees all."""
    queue = RunQueue(database)
    await backlog(database, "acme", sessions=3, per_session=4)

    async def churn(n: int) -> None:
        for _ in range(6):
            for run in (await queue.claim_batch(f"w{n}", 30, limit=2)).runs:
                await finish(database, run.id)
            async with database.owner() as s:
                await s.execute(
                    text(
                        "INSERT INTO agent_run_queue (tenant_id, session_id, agent_id, user_id, "
                        "input) SELECT tenant_id, id, agent_id, user_id, '{}' FROM agent_sessions "
                        "ORDER BY session_key LIMIT 1"
                    )
                )

    await asyncio.gather(*(churn(n) for n in range(4)))
    await assert_lanes_match(database)


async def test_a_batch_takes_one_run_per_lane_in_turns_across_tenants(
    database: Database,
) -> None:
    queue = RunQueue(database)
    await backlog(database, "acme", sessions=4, per_session=3)
    await backlog(database, "evil", sessions=1, per_session=5)
    batch = (await queue.claim_batch("w", 30, limit=3)).runs
    tenants = [c.tenant_id for c in batch]
    assert sorted(tenants) == ["acme", "acme", "evil"]  # evil's one lane, not its 5 runs
    assert len({c.session_id for c in batch}) == 3
    rest = await queue.claim_batch("w", 30, limit=10)
    assert [c.tenant_id for c in rest.runs] == ["acme", "acme"]  # every other lane is busy
    assert rest.next_window is None  # no collect window anywhere
    assert await queue.claim_next("w", 30) is None


async def test_only_the_worker_role_reads_the_lanes(database: Database, alice: Principal) -> None:
    await RunQueue(database).enqueue_run(alice, message="x")
    async with database.queue() as s:
        assert await s.scalar(text("SELECT count(*) FROM queue_lanes")) == 1
    with pytest.raises(DBAPIError, match="permission denied"):
        async with database.queue() as s:
            await s.execute(text("UPDATE queue_lanes SET busy = false"))
    with pytest.raises(DBAPIError, match="permission denied"):
        async with database.tenant(alice) as s:
            await s.execute(text("SELECT * FROM queue_lanes"))


async def test_workers_are_woken_only_when_a_lane_is_left_claimable(
    database: Database, db_url: str, alice: Principal
) -> None:
    """`agent_runtime_runs` (migration 0023) is sent, with the lane's head, when a run becomes
    claimable: a post into an idle lane, the end of a run whose lane has a next run. Not for a
    post behind a busy lane, nor for the end of a run whose lane is then empty."""
    queue = RunQueue(database)
    heard: list[str] = []
    conn = await asyncpg.connect(asyncpg_dsn(database.url))
    await conn.add_listener("agent_runtime_runs", lambda *args: heard.append(args[-1]))

    async def notified() -> list[str]:
        await asyncio.sleep(0.2)
        got = heard[:]
        heard.clear()
        return got

    try:
        first = await queue.enqueue_run(alice, message="a", session_key="k")
        assert await notified() == [str(first.run_id)]  # an idle lane: claimable
        claimed = await queue.claim_next("w", 30)
        assert claimed is not None and claimed.id == first.run_id
        assert await notified() == []  # the lane is busy now
        second = await queue.enqueue_run(alice, message="b", session_key="k")
        assert await notified() == []  # behind a busy lane: nothing to claim
        await finish(database, first.run_id)
        assert await notified() == [str(second.run_id)]  # the lane's next run is claimable
        again = await queue.claim_next("w", 30)
        assert again is not None and again.id == second.run_id
        await finish(database, second.run_id)
        assert await notified() == []  # nothing left in the lane
    finally:
        await conn.close()
