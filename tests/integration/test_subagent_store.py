"""The sub-agent tools and sweeps called directly on a claimed run (real Postgres, no worker):
idempotent re-execution by tool call id, concurrent spawns against the limits, what
`sessions_wait` returns at each point, and the heartbeat's sweeps racing each other."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import func, select, text

from app.auth.principal import Principal
from app.config import Settings
from app.core.events import ToolStartedEvent
from app.db.engine import Database
from app.db.models import Run, RunEvent, SubagentSpawn
from app.queue.event_log import emit_unleased
from app.queue.lease import LeasedRun
from app.queue.manager import RunQueue
from app.queue.sweeps import cancel_orphans, fail_overdue
from app.tools.base import AwaitingArrival, ToolContext, ToolError
from app.tools.subagent_tools import SessionsSpawn, SessionsWait

SPAWN = SessionsSpawn()
WAIT = SessionsWait()


def settings(**overrides: Any) -> Settings:
    return Settings(_env_file=None, **overrides)  # type: ignore[call-arg]


async def running_parent(db: Database, who: Principal, **overrides: Any) -> ToolContext:
    """A claimed (running) run and the context its tools get."""
    queue = RunQueue(db)
    run = await queue.enqueue_run(who, message="boss", session_key="boss")
    claimed = await queue.claim_next("w-parent", 30)
    assert claimed is not None and claimed.id == run.run_id
    return ToolContext(
        db=db,
        principal=who,
        session_id=claimed.session_id,
        run_id=claimed.id,
        settings=settings(**overrides),
        tool_call_id="call-1",
    )


def call(ctx: ToolContext, call_id: str) -> ToolContext:
    return ToolContext(
        db=ctx.db,
        principal=ctx.principal,
        session_id=ctx.session_id,
        run_id=ctx.run_id,
        settings=ctx.settings,
        tool_call_id=call_id,
    )


async def count(db: Database, who: Principal, sql: str, **params: Any) -> int:
    async with db.tenant(who) as s:
        return int(await s.scalar(text(sql), params) or 0)


async def finish_child(db: Database, child: UUID, answer: str) -> None:
    """Claim the child as a worker would and finish it completed."""
    queue = RunQueue(db)
    claimed = await queue.claim_next("w-child", 30)
    assert claimed is not None and claimed.id == child
    await LeasedRun(db, claimed, "w-child").finish("completed", result={"text": answer})


async def test_a_re_executed_spawn_finds_its_child(database: Database, alice: Principal) -> None:
    ctx = await running_parent(database, alice)
    first = await SPAWN.run(ctx, {"task": "count", "label": "c", "timeoutSeconds": 60})
    again = await SPAWN.run(ctx, {"task": "count", "label": "c", "timeoutSeconds": 60})
    assert first == again
    assert first["childSessionKey"].startswith("boss:sub:") and len(first["childSessionKey"]) == 17
    assert await count(database, alice, "SELECT count(*) FROM subagent_spawns") == 1
    assert await count(database, alice, "SELECT count(*) FROM agent_run_queue") == 2
    spawned = await count(
        database,
        alice,
        "SELECT count(*) FROM run_events WHERE run_id = :r AND type = 'subagent.spawned'",
        r=ctx.run_id,
    )
    assert spawned == 1
    async with database.tenant(alice) as s:
        child = await s.get(Run, UUID(first["runId"]))
        left = await s.scalar(
            select(func.extract("epoch", Run.deadline_at - func.now())).where(
                Run.id == UUID(first["runId"])
            )
        )
        [spawn] = (await s.scalars(select(SubagentSpawn))).all()
    assert child is not None and child.parent_run_id == ctx.run_id and child.status == "queued"
    assert child.input == {"message": "count"}
    assert 55 < float(left) <= 60
    assert (spawn.depth, spawn.label, spawn.status, spawn.tool_call_id) == (
        1,
        "c",
        "running",
        "call-1",
    )
    assert spawn.timeout_seconds == 60 and spawn.child_session_key == first["childSessionKey"]

    # another call id is another child
    other = await SPAWN.run(call(ctx, "call-2"), {"task": "more"})
    assert other["runId"] != first["runId"]


async def test_concurrent_executions_of_one_spawn_make_one_child(
    database: Database, alice: Principal
) -> None:
    ctx = await running_parent(database, alice)
    results = await asyncio.gather(*(SPAWN.run(ctx, {"task": "same"}) for _ in range(4)))
    assert all(r == results[0] for r in results)
    assert await count(database, alice, "SELECT count(*) FROM subagent_spawns") == 1
    assert await count(database, alice, "SELECT count(*) FROM agent_run_queue") == 2


async def test_concurrent_spawns_cannot_both_pass_the_tenant_cap(
    database: Database, alice: Principal
) -> None:
    ctx = await running_parent(database, alice, subagent_max_concurrent_per_tenant=1)
    outcomes = await asyncio.gather(
        *(SPAWN.run(call(ctx, f"c{i}"), {"task": "t"}) for i in range(3)), return_exceptions=True
    )
    ok = [o for o in outcomes if isinstance(o, dict)]
    refused = [o for o in outcomes if isinstance(o, ToolError)]
    assert len(ok) == 1 and len(refused) == 2, outcomes
    assert all("too many sub-agents running" in e.message for e in refused)
    assert await count(database, alice, "SELECT count(*) FROM subagent_spawns") == 1


async def test_unknown_and_foreign_agents_are_refused(
    database: Database, alice: Principal, mallory: Principal
) -> None:
    ctx = await running_parent(database, alice)
    theirs = await running_parent(database, mallory)
    async with database.tenant(mallory) as s:
        mallory_agent = await s.scalar(select(Run.agent_id).where(Run.id == theirs.run_id))
    for agent in (UUID(int=5), mallory_agent):
        with pytest.raises(ToolError, match=f"agent {agent} not found"):
            await SPAWN.run(call(ctx, f"a-{agent}"), {"task": "t", "agentId": str(agent)})
    assert await count(database, alice, "SELECT count(*) FROM subagent_spawns") == 0


async def test_a_run_being_cancelled_spawns_nothing(database: Database, alice: Principal) -> None:
    ctx = await running_parent(database, alice)
    assert await RunQueue(database).cancel(alice, ctx.run_id) == "running"
    with pytest.raises(ToolError, match="this run is ending"):
        await SPAWN.run(ctx, {"task": "t"})


async def test_wait_returns_consumes_and_repeats_the_same_outcomes(
    database: Database, alice: Principal
) -> None:
    ctx = await running_parent(database, alice)
    assert await WAIT.run(call(ctx, "w0"), {}) == {"results": [], "pending": []}
    child = UUID((await SPAWN.run(ctx, {"task": "t", "label": "kid"}))["runId"])
    with pytest.raises(ToolError, match="not sub-agents of this run"):
        await WAIT.run(call(ctx, "w1"), {"runIds": [str(UUID(int=9))]})

    wait = call(ctx, "w2")
    with pytest.raises(AwaitingArrival) as parked:
        await WAIT.run(wait, {"timeoutSeconds": 60})
    assert parked.value.awaited == [child]

    await finish_child(database, child, "seven")
    expected = {
        "results": [
            {
                "label": "kid",
                "status": "completed",
                "result": "seven",
                "childRunId": str(child),
                "childSessionKey": (await child_key(database, alice, child)),
            }
        ],
        "pending": [],
    }
    assert await WAIT.run(wait, {"timeoutSeconds": 60}) == expected
    assert await WAIT.run(wait, {"timeoutSeconds": 60}) == expected  # re-executed: the same
    # consumed by that call: a new default wait has nothing left; an explicit one still reads it
    assert await WAIT.run(call(ctx, "w3"), {}) == {"results": [], "pending": []}
    assert await WAIT.run(call(ctx, "w4"), {"runIds": [str(child)]}) == expected
    delivered = await count(
        database,
        alice,
        "SELECT count(*) FROM run_inbox WHERE delivery = 'tool' AND tool_call_id = 'w2'",
    )
    assert delivered == 1


async def child_key(db: Database, who: Principal, child: UUID) -> str:
    async with db.tenant(who) as s:
        key = await s.scalar(
            select(SubagentSpawn.child_session_key).where(SubagentSpawn.child_run_id == child)
        )
    assert key is not None
    return key


async def test_wait_times_out_from_its_first_start_and_stops_for_a_user_message(
    database: Database, alice: Principal
) -> None:
    ctx = await running_parent(database, alice)
    child = UUID((await SPAWN.run(ctx, {"task": "t"}))["runId"])
    wait = call(ctx, "w1")
    # the call's first start, as the loop records it (a resumed attempt finds the same)
    async with database.tenant(alice) as s:
        await emit_unleased(
            s,
            ctx.run_id,
            alice.tenant_id,
            [ToolStartedEvent(tool_call_id="w1", name="sessions_wait", args={})],
        )
    with pytest.raises(AwaitingArrival) as parked:
        await WAIT.run(wait, {"timeoutSeconds": 1})
    first_deadline = parked.value.wake_at
    await asyncio.sleep(1.1)
    async with database.tenant(alice) as s:  # a later start does not move the deadline
        await emit_unleased(
            s,
            ctx.run_id,
            alice.tenant_id,
            [ToolStartedEvent(tool_call_id="w1", name="sessions_wait", args={})],
        )
    assert await WAIT.run(wait, {"timeoutSeconds": 1}) == {
        "results": [],
        "pending": [str(child)],
        "timedOut": True,
    }
    with pytest.raises(AwaitingArrival) as again:
        await WAIT.run(call(ctx, "w2"), {"timeoutSeconds": 60})
    assert again.value.wake_at > first_deadline

    async with database.tenant(alice) as s:
        await s.execute(
            text(
                "INSERT INTO run_inbox (tenant_id, run_id, kind, text) "
                "VALUES (:t, :r, 'steer', 'stop waiting')"
            ),
            {"t": alice.tenant_id, "r": ctx.run_id},
        )
    assert await WAIT.run(call(ctx, "w2"), {"timeoutSeconds": 60}) == {
        "results": [],
        "pending": [str(child)],
        "interrupted": "a new message arrived",
    }


async def test_the_deadline_sweep_fails_an_overdue_child_once(
    database: Database, alice: Principal
) -> None:
    ctx = await running_parent(database, alice)
    child = UUID((await SPAWN.run(ctx, {"task": "t", "timeoutSeconds": 60}))["runId"])
    assert await fail_overdue(database) == []  # not due yet
    async with database.owner() as s:
        await s.execute(
            text("UPDATE agent_run_queue SET deadline_at = now() - interval '1 s' WHERE id = :c"),
            {"c": child},
        )
    swept = await asyncio.gather(fail_overdue(database), fail_overdue(database))
    assert sorted(len(found) for found in swept) == [0, 1]  # two workers: one fails it
    async with database.tenant(alice) as s:
        run = await s.get(Run, child)
        types = list(
            await s.scalars(
                select(RunEvent.type).where(RunEvent.run_id == child).order_by(RunEvent.seq)
            )
        )
        [spawn] = (await s.scalars(select(SubagentSpawn))).all()
    assert run is not None and run.status == "failed" and run.error is not None
    assert run.error["code"] == "run_timeout"
    assert types == ["run.queued", "run.failed"]
    assert spawn.status == "timed_out"
    # the parent is live: the outcome is in its inbox
    assert (
        await count(database, alice, "SELECT count(*) FROM run_inbox WHERE delivered_at IS NULL")
        == 1
    )


@pytest.mark.parametrize("child_running", [False, True])
async def test_the_orphan_sweep_catches_a_child_the_cancel_skipped(
    database: Database, alice: Principal, child_running: bool
) -> None:
    ctx = await running_parent(database, alice)
    child = UUID((await SPAWN.run(ctx, {"task": "t"}))["runId"])
    if child_running:
        claimed = await RunQueue(database).claim_next("w-child", 30)
        assert claimed is not None and claimed.id == child
    # a worker holds the child's row while the parent is cancelled: the trigger skips it
    async with database.owner() as lock:
        await lock.execute(
            text("SELECT 1 FROM agent_run_queue WHERE id = :c FOR UPDATE"), {"c": child}
        )
        async with database.tenant(alice) as s:
            await s.execute(
                text(
                    "UPDATE agent_run_queue SET status = 'cancelled', finished_at = now() "
                    "WHERE id = :p"
                ),
                {"p": ctx.run_id},
            )
    async with database.tenant(alice) as s:
        missed = await s.get(Run, child)
    assert missed is not None and missed.cancel_requested_at is None
    assert missed.status == ("running" if child_running else "queued")

    assert await cancel_orphans(database) == [child]
    assert await cancel_orphans(database) == []  # done: nothing more to do
    async with database.tenant(alice) as s:
        after = await s.get(Run, child)
        types = list(
            await s.scalars(
                select(RunEvent.type).where(RunEvent.run_id == child).order_by(RunEvent.seq)
            )
        )
    assert after is not None and after.cancel_requested_at is not None
    if child_running:
        assert after.status == "running"  # its worker stops it
    else:
        assert after.status == "cancelled" and after.error is not None
        assert after.error["message"] == "parent run cancelled"
        assert types == ["run.queued", "run.cancelled"]
