"""The lane queue against the real Postgres: ordering, exclusivity, leases, fencing, RLS."""

from __future__ import annotations

import asyncio
from uuid import UUID

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError

from app.auth.principal import Principal
from app.core.errors import ConflictError, LeaseLostError, NotFoundError
from app.core.transcript import ToolCall, UserMessage
from app.db.engine import Database
from app.db.models import Run, ToolExecution
from app.db.models import RunEvent as RunEventRow
from app.queue.busy import retry_contended
from app.queue.lease import LeasedRun
from app.queue.manager import RunQueue
from app.runtime.tool_records import tool_started
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


# ---------------------------------------------------------------- a run whose worker keeps dying


async def _expire(database: Database, run_id: object) -> None:
    """The holder of the run died: its lease is over."""
    async with database.owner() as s:
        await s.execute(
            text(
                "UPDATE agent_run_queue SET lease_expires_at = now() - interval '1 s' WHERE id = :id"
            ),
            {"id": run_id},
        )


async def _run_row(database: Database, run_id: object) -> Run:
    async with database.owner() as s:
        row = await s.scalar(select(Run).where(Run.id == run_id))
        assert row is not None
        return row


async def _events(database: Database, run_id: object) -> list[tuple[str, dict[str, object]]]:
    async with database.owner() as s:
        rows = await s.scalars(
            select(RunEventRow).where(RunEventRow.run_id == run_id).order_by(RunEventRow.seq)
        )
        return [(r.type, r.data) for r in rows]


async def test_a_run_whose_worker_stops_max_times_fails_and_its_lane_moves_on(
    database: Database, alice: Principal
) -> None:
    queue = RunQueue(database, max_run_attempts=2)
    run = await queue.enqueue_run(alice, message="/tool oom", session_key="k")
    nxt = await queue.enqueue_run(alice, message="next", session_key="k")

    first = await queue.claim_next("w1", 30)
    assert first is not None and (first.id, first.attempt, first.lease_expiries) == (
        run.run_id,
        1,
        0,
    )
    await _expire(database, run.run_id)
    assert await queue.fail_exhausted() == []  # below the limit: taken over, not failed
    assert await queue.recover_expired() == [run.run_id]

    second = await queue.claim_next("w2", 30)
    assert second is not None and (second.id, second.attempt, second.lease_expiries) == (
        run.run_id,
        2,
        1,
    )
    await tool_started(LeasedRun(database, second, "w2"), ToolCall(id="c1", name="run_python"))
    await _expire(database, run.run_id)
    assert await queue.recover_expired() == []  # at the limit: not requeued...
    assert (await _run_row(database, run.run_id)).status == "running"
    assert await queue.claim_next("w3", 30) is None  # ...and the lane is still held
    assert await queue.fail_exhausted() == [run.run_id]

    row = await _run_row(database, run.run_id)
    assert (row.status, row.attempts, row.lease_expiries) == ("failed", 2, 2)
    assert row.error == {
        "code": "worker_crashed",
        "message": "the run's worker stopped 2 times (MAX_RUN_ATTEMPTS=2); giving up",
    }
    assert row.finished_at is not None
    assert (row.lease_owner, row.lease_expires_at, row.state) == (None, None, None)
    events = await _events(database, run.run_id)
    assert [t for t, _ in events] == [
        "run.queued",
        "run.started",  # each claim stores its start event
        "run.resumed",
        "tool.started",
        "run.failed",
    ]
    assert events[-1][1] == {"error": row.error}
    async with database.owner() as s:
        call = await s.scalar(select(ToolExecution).where(ToolExecution.run_id == run.run_id))
    assert call is not None and call.status == "interrupted"  # the call that was in flight

    after = await queue.claim_next("w3", 30)
    assert after is not None and after.id == nxt.run_id
    assert await queue.fail_exhausted() == []  # nothing left to give up on


async def test_only_lease_expiries_count_not_hand_backs(
    database: Database, alice: Principal
) -> None:
    """A run claimed again after hand-backs (or approvals) has not crashed: attempts > limit is
    not a reason to fail it; its first lease expiry is recovered as usual."""
    queue = RunQueue(database, max_run_attempts=2)
    run = await queue.enqueue_run(alice, message="long", session_key="k")
    for n in range(1, 4):
        claimed = await queue.claim_next(f"w{n}", 30)
        assert claimed is not None and claimed.attempt == n
        await LeasedRun(database, claimed, f"w{n}").hand_back()
    claimed = await queue.claim_next("w4", 30)
    assert claimed is not None and (claimed.attempt, claimed.lease_expiries) == (4, 0)
    await _expire(database, run.run_id)
    assert await queue.fail_exhausted() == []
    assert await queue.recover_expired() == [run.run_id]
    again = await queue.claim_next("w5", 30)
    assert again is not None and (again.attempt, again.lease_expiries) == (5, 1)


async def test_racing_sweeps_fail_a_run_exactly_once(
    database: Database, db_url: str, alice: Principal
) -> None:
    queue = RunQueue(database, max_run_attempts=1)
    other_db = Database(db_url, pool_size=2)
    try:
        other = RunQueue(other_db, max_run_attempts=1)
        run = await queue.enqueue_run(alice, message="x", session_key="k")
        assert await queue.claim_next("w1", 30) is not None
        await _expire(database, run.run_id)

        # Both sweeps found the run before either failed it: only one may fail it.
        found = [await queue.expired_at_limit(), await other.expired_at_limit()]
        assert [[r.id for r in f] for f in found] == [[run.run_id], [run.run_id]]
        results = await asyncio.gather(
            queue.fail_crashed(found[0][0]), other.fail_crashed(found[1][0])
        )
        assert sorted(results) == [False, True]
        # Whole sweeps racing: nothing left to fail, nothing failed twice.
        assert await asyncio.gather(queue.fail_exhausted(), other.fail_exhausted()) == [[], []]
    finally:
        await other_db.dispose()
    types = [t for t, _ in await _events(database, run.run_id)]
    assert types == ["run.queued", "run.started", "run.failed"]


async def test_concurrent_full_sweeps_fail_once(
    database: Database, db_url: str, alice: Principal
) -> None:
    dbs = [Database(db_url, pool_size=2) for _ in range(4)]
    try:
        queues = [RunQueue(db, max_run_attempts=1) for db in dbs]
        runs = [
            await queues[0].enqueue_run(alice, message="x", session_key=f"k{i}") for i in range(3)
        ]
        for r in runs:
            assert await queues[0].claim_next("w1", 30) is not None
            await _expire(database, r.run_id)
        failed = await asyncio.gather(*(q.fail_exhausted() for q in queues))
    finally:
        for db in dbs:
            await db.dispose()
    assert sorted(r for f in failed for r in f) == sorted(r.run_id for r in runs)
    for r in runs:
        assert [t for t, _ in await _events(database, r.run_id)].count("run.failed") == 1


async def test_a_run_renewed_or_taken_over_meanwhile_is_not_failed(
    database: Database, alice: Principal
) -> None:
    queue = RunQueue(database, max_run_attempts=1)
    run = await queue.enqueue_run(alice, message="x", session_key="k")
    claimed = await queue.claim_next("slow", 30)
    assert claimed is not None
    await _expire(database, run.run_id)
    [found] = await queue.expired_at_limit()
    # The worker was only slow: it renews its lease before the sweep fails the run.
    assert await queue.renew_leases("slow", [run.run_id], 30) == {run.run_id: False}
    assert await queue.fail_crashed(found) is False
    assert (await _run_row(database, run.run_id)).status == "running"

    # An older sweep's find is stale once the run was recovered and claimed again.
    await _expire(database, run.run_id)
    [stale] = await queue.expired_at_limit()
    async with database.owner() as s:
        await s.execute(
            text(
                "UPDATE agent_run_queue SET status = 'queued', lease_owner = NULL, "
                "lease_expires_at = NULL WHERE id = :id"
            ),
            {"id": run.run_id},
        )
    again = await queue.claim_next("w2", 0.01)
    assert again is not None and again.attempt == 2
    await asyncio.sleep(0.05)  # its (tiny) lease has expired too
    assert await queue.fail_crashed(stale) is False
    assert await queue.fail_exhausted() == [run.run_id]  # the current claim is failed
    types = [t for t, _ in await _events(database, run.run_id)]
    assert types == ["run.queued", "run.started", "run.resumed", "run.failed"]


async def test_a_post_chosen_to_break_a_deadlock_on_its_session_row_posts_again(
    database: Database, alice: Principal
) -> None:
    """A post waiting for its session's row can close a lock cycle; when Postgres picks it as the
    deadlock's victim, the post is rolled back and made again (not a 500)."""
    queue = RunQueue(database)
    await queue.enqueue_run(alice, message="one", session_key="cycle")
    attempts = 0
    row_locked, post_waits = asyncio.Event(), asyncio.Event()

    async def post() -> UUID:
        async def attempt() -> UUID:
            nonlocal attempts
            attempts += 1
            async with database.tenant(alice) as s:
                await s.execute(text("SELECT pg_advisory_xact_lock(4242)"))  # held by the post
                post_waits.set()
                enqueued = await queue.enqueue_in(s, alice, message="two", session_key="cycle")
                return enqueued.run_id

        await row_locked.wait()
        return await retry_contended(attempt)

    async def holder() -> None:
        """Holds the session row, then waits for the post's lock: a cycle."""
        async with database.owner() as s:
            await s.execute(text("SET LOCAL deadlock_timeout = '20s'"))  # the post detects it
            await s.execute(
                text("UPDATE agent_sessions SET title = title WHERE session_key = 'cycle'")
            )
            row_locked.set()
            await post_waits.wait()
            await asyncio.sleep(0.2)  # the post is waiting for the row now
            await s.execute(text("SELECT pg_advisory_xact_lock(4242)"))

    run_id, _ = await asyncio.wait_for(asyncio.gather(post(), holder()), timeout=20)
    assert attempts == 2
    async with database.tenant(alice) as s:
        run = await s.get(Run, run_id)
    assert run is not None and run.input == {"message": "two"} and run.status == "queued"
