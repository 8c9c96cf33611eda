"""The lane queue against the real Postgres: ordering, exclusivity, leases, fencing, RLS."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from app.auth.principal import Principal
from app.core.errors import ConflictError, LeaseLostError, NotFoundError
from app.core.transcript import UserMessage
from app.db.engine import Database
from app.queue.lease import LeasedRun
from app.queue.manager import RunQueue
from app.runtime.transcript_store import append_messages


@pytest.fixture
def queue(database: Database) -> RunQueue:
    return RunQueue(database)


async def test_lane_runs_in_order_one_at_a_time(queue: RunQueue, alice: Principal) -> None:
    first = await queue.enqueue_run(alice, message="one", session_key="lane")
    second = await queue.enqueue_run(alice, message="two", session_key="lane")
    other = await queue.enqueue_run(alice, message="three", session_key="other")

    a = await queue.claim_next("w1", 30)
    b = await queue.claim_next("w2", 30)
    assert a is not None and b is not None
    assert (a.id, b.id) == (first.run_id, other.run_id)
    assert await queue.claim_next("w3", 30) is None  # lane "lane" is busy

    leased = LeasedRun(queue.db, a, "w1")
    await leased.finish("completed", result={"text": "ok"})
    c = await queue.claim_next("w3", 30)
    assert c is not None and c.id == second.run_id


async def test_database_refuses_two_active_runs_in_a_session(
    queue: RunQueue, database: Database, alice: Principal
) -> None:
    await queue.enqueue_run(alice, message="one", session_key="k")
    await queue.enqueue_run(alice, message="two", session_key="k")
    with pytest.raises(IntegrityError):
        async with database.owner() as s:
            await s.execute(text("UPDATE agent_run_queue SET status = 'running'"))


async def test_racing_claims_never_both_win(queue: RunQueue, alice: Principal) -> None:
    for i in range(5):
        await queue.enqueue_run(alice, message=f"m{i}", session_key="race")
    claims = await asyncio.gather(*(queue.claim_next(f"w{i}", 30) for i in range(8)))
    assert len([c for c in claims if c is not None]) == 1


async def test_expired_lease_is_recovered_and_old_owner_fenced(
    queue: RunQueue, database: Database, alice: Principal
) -> None:
    run = await queue.enqueue_run(alice, message="hi", session_key="k")
    claimed = await queue.claim_next("dead", 30)
    assert claimed is not None
    async with database.owner() as s:
        await s.execute(
            text("UPDATE agent_run_queue SET lease_expires_at = now() - interval '1 s'")
        )
    assert await queue.recover_expired() == [run.run_id]
    again = await queue.claim_next("alive", 30)
    assert again is not None and again.id == run.run_id and again.attempt == 2

    zombie = LeasedRun(database, claimed, "dead")
    with pytest.raises(LeaseLostError):
        await append_messages(zombie, [UserMessage(text="late write")])
    owner = LeasedRun(database, again, "alive")
    assert await append_messages(owner, [UserMessage(text="hi")]) == [1]


async def test_renew_reports_cancel_and_cancel_rules(queue: RunQueue, alice: Principal) -> None:
    queued = await queue.enqueue_run(alice, message="a", session_key="x")
    behind = await queue.enqueue_run(alice, message="b", session_key="x")
    claimed = await queue.claim_next("w", 30)
    assert claimed is not None and claimed.id == queued.run_id

    assert await queue.cancel(alice, behind.run_id) == "cancelled"
    assert await queue.cancel(alice, behind.run_id) == "cancelled"  # idempotent
    assert await queue.renew_leases("w", [claimed.id], 30) == {claimed.id: False}
    assert await queue.cancel(alice, claimed.id) == "running"
    assert await queue.renew_leases("w", [claimed.id], 30) == {claimed.id: True}
    await LeasedRun(queue.db, claimed, "w").finish("cancelled")
    done = await queue.enqueue_run(alice, message="c", session_key="y")
    c = await queue.claim_next("w", 30)
    assert c is not None and c.id == done.run_id
    await LeasedRun(queue.db, c, "w").finish("completed", result={"text": "x"})
    with pytest.raises(ConflictError):
        await queue.cancel(alice, done.run_id)


async def test_other_tenant_cannot_see_or_cancel(
    queue: RunQueue, alice: Principal, mallory: Principal
) -> None:
    run = await queue.enqueue_run(alice, message="secret", session_key="shared-key")
    assert await queue.get_run(mallory, run.run_id) is None
    with pytest.raises(NotFoundError):
        await queue.cancel(mallory, run.run_id)
    theirs = await queue.enqueue_run(mallory, message="x", session_key="shared-key")
    mine = await queue.get_run(alice, run.run_id)
    their_run = await queue.get_run(mallory, theirs.run_id)
    assert mine is not None and their_run is not None
    assert mine[0].session_id != their_run[0].session_id


async def test_rls_confines_raw_sql(database: Database, queue: RunQueue) -> None:
    a = Principal("u1", "t1")
    b = Principal("u2", "t2")
    await queue.enqueue_run(a, message="a")
    await queue.enqueue_run(b, message="b")
    async with database.tenant(a) as s:
        tenants = set(await s.scalars(text("SELECT tenant_id FROM agent_run_queue")))
        assert tenants == {"t1"}
        with pytest.raises(Exception, match="row-level security"):
            await s.execute(text("INSERT INTO agents (tenant_id, name) VALUES ('t2', 'sneaky')"))
    async with database.tenant(a) as s:
        assert (
            await s.execute(
                text("UPDATE agent_run_queue SET status = 'failed' WHERE tenant_id = 't2'")
            )
        ).rowcount == 0  # type: ignore[attr-defined]
        assert await s.scalar(text("SELECT current_user")) == "agent_runtime_app"
