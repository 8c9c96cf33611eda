"""Fair claiming across tenants: a tenant's backlog does not starve another tenant's one run, and
the lane rules hold under the round-robin claim. Backlogs are bulk-inserted in SQL."""

from __future__ import annotations

from uuid import UUID

import pytest
from sqlalchemy import text

from app.auth.principal import Principal
from app.db.engine import Database
from app.queue.manager import RunQueue
from app.queue.sql import query

pytestmark = pytest.mark.timeout(60)

BACKLOG = text(
    """
    WITH agent AS (
      INSERT INTO agents (tenant_id, name) VALUES (:tenant, 'bulk') RETURNING id
    ), sessions AS (
      INSERT INTO agent_sessions (tenant_id, session_key, agent_id, user_id)
      SELECT :tenant, 'bulk-' || n, agent.id, 'u' FROM agent, generate_series(1, :sessions) n
      RETURNING id, agent_id
    )
    INSERT INTO agent_run_queue (tenant_id, session_id, agent_id, user_id, input)
    SELECT :tenant, s.id, s.agent_id, 'u', '{"message": "bulk"}'
    FROM sessions s, generate_series(1, :per_session)
    """
)


async def backlog(db: Database, tenant: str, sessions: int, per_session: int) -> None:
    """`sessions` sessions of `tenant` with `per_session` queued runs each."""
    async with db.owner() as s:
        await s.execute(
            BACKLOG, {"tenant": tenant, "sessions": sessions, "per_session": per_session}
        )


async def fifo_pick(db: Database) -> str:
    """The tenant the old claim order (globally oldest claimable run first) would serve now."""
    async with db.queue() as s:
        return str(
            await s.scalar(
                text(
                    "SELECT tenant_id FROM queue_lanes WHERE NOT busy "
                    "AND (ready_at IS NULL OR ready_at <= now()) ORDER BY head_seq LIMIT 1"
                )
            )
        )


async def finish(db: Database, run_id: UUID) -> None:
    async with db.owner() as s:
        await s.execute(
            text(
                "UPDATE agent_run_queue SET status = 'completed', finished_at = now() WHERE id = :id"
            ),
            {"id": run_id},
        )


async def test_one_run_of_b_starts_within_one_slot_turnover_under_as_backlog(
    database: Database, mallory: Principal
) -> None:
    queue = RunQueue(database)
    await backlog(database, "acme", sessions=100, per_session=10)  # 1,000 queued runs
    # a worker with 2 slots fills them with A's runs
    slots = [await queue.claim_next("w", 30) for _ in range(2)]
    assert [c.tenant_id for c in slots if c is not None] == ["acme", "acme"]
    b = await queue.enqueue_run(mallory, message="mine")
    # the old claim order would serve A's backlog first (~998 runs ahead of B)
    assert await fifo_pick(database) == "acme"
    # one slot turns over: the next claim is B's run
    assert slots[0] is not None
    await finish(database, slots[0].id)
    nxt = await queue.claim_next("w", 30)
    assert nxt is not None and nxt.id == b.run_id
    # and then A again (B has nothing left)
    again = await queue.claim_next("w", 30)
    assert again is not None and again.tenant_id == "acme"


async def test_tenants_with_backlogs_take_turns(database: Database) -> None:
    queue = RunQueue(database)
    await backlog(database, "acme", sessions=5, per_session=2)
    await backlog(database, "evil", sessions=5, per_session=2)
    await backlog(database, "third", sessions=5, per_session=2)
    tenants = []
    for _ in range(9):
        claimed = await queue.claim_next("w", 30)
        assert claimed is not None
        tenants.append(claimed.tenant_id)
    assert sorted(tenants[:3]) == sorted(tenants[3:6]) == sorted(tenants[6:9])
    assert tenants[:3] == tenants[3:6] == tenants[6:9]  # a stable rotation
    assert len(set(tenants[:3])) == 3
    async with database.queue() as s:
        stamped = (await s.execute(text("SELECT count(*) FROM tenant_claims"))).scalar_one()
    assert stamped == 3


async def test_lane_rules_hold_under_the_fair_claim(database: Database) -> None:
    """One active run per session (the head of its lane first), `not_before` and parked runs
    holding their lane, whatever tenant's turn it is."""
    queue = RunQueue(database)
    await backlog(database, "acme", sessions=1, per_session=3)
    await backlog(database, "evil", sessions=2, per_session=1)
    async with database.owner() as s:
        # evil's first session: its run is parked waiting -> the lane is held
        # evil's second: held back by a debounce window
        await s.execute(
            text(
                "UPDATE agent_run_queue SET status = 'waiting' WHERE id = (SELECT r.id FROM "
                "agent_run_queue r JOIN agent_sessions s ON s.id = r.session_id "
                "WHERE s.session_key = 'bulk-1' AND r.tenant_id = 'evil')"
            )
        )
        await s.execute(
            text(
                "UPDATE agent_run_queue SET not_before = now() + interval '1 hour' WHERE id = "
                "(SELECT r.id FROM agent_run_queue r JOIN agent_sessions s "
                "ON s.id = r.session_id WHERE s.session_key = 'bulk-2' AND r.tenant_id = 'evil')"
            )
        )
        seqs = list(
            await s.scalars(
                text("SELECT id FROM agent_run_queue WHERE tenant_id = 'acme' ORDER BY queue_seq")
            )
        )
    first = await queue.claim_next("w", 30)
    assert first is not None and first.id == seqs[0]  # acme's lane head; evil has nothing claimable
    assert await queue.claim_next("w", 30) is None  # acme's lane is busy, evil's are held
    await finish(database, first.id)
    second = await queue.claim_next("w", 30)
    assert second is not None and second.id == seqs[1]


async def test_parallel_claims_on_one_tenants_backlog_all_find_a_run(database: Database) -> None:
    """The fair claim offers one head per tenant; a claim that finds that head locked by a
    concurrent claim must still take another claimable run, not come back empty."""
    queue = RunQueue(database)
    await backlog(database, "acme", sessions=20, per_session=1)
    # acme was claimed before (a tenant's very first claim waits for a concurrent first claim's
    # stamp to commit, which the open transaction below would never do)
    async with database.owner() as s:
        await s.execute(text("INSERT INTO tenant_claims VALUES ('acme', now() - interval '1 h')"))
    # hold acme's fair head in an open transaction, as a concurrent claim would
    async with database.queue() as held:
        first = (
            await held.execute(
                query("claim_runs"),
                {"worker_id": "w1", "lease_seconds": 30, "limit": 1, "max_attempts": 5},
            )
        ).one()
        other = await queue.claim_next("w2", 30)
        assert other is not None and other.id != first.id
