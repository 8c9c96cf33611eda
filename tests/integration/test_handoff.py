"""The hand-off rows of migration 0006 against the real Postgres: a child's outcome reaches its
parent exactly once (inbox while it is live, a follow-up run once it has ended, dropped once it
was cancelled), a steering message is never lost, and a cancelled run cancels its children.

These drive the run-ended trigger directly through the queue's verbs (claim, finish, cancel);
the tools that make these rows (`sessions_spawn`, `sessions_send`) and the API (`ifBusy`) have
their own tests."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import text

from app.auth.principal import Principal
from app.core.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage, load_message
from app.db.engine import Database
from app.queue.lease import LeasedRun
from app.queue.manager import ClaimedRun, RunQueue
from app.runtime.transcript_store import append_messages


async def _claim(queue: RunQueue, run_id: UUID, worker: str = "w") -> LeasedRun:
    claimed: ClaimedRun | None = await queue.claim_next(worker, 30)
    assert claimed is not None and claimed.id == run_id, claimed
    return LeasedRun(queue.db, claimed, worker)


async def _spawn(db: Database, alice: Principal, parent: UUID, child: UUID) -> None:
    """A spawn row as `sessions_spawn` writes it (and the child's parent link)."""
    async with db.tenant(alice) as s:
        await s.execute(
            text("UPDATE agent_run_queue SET parent_run_id = :p WHERE id = :c"),
            {"p": parent, "c": child},
        )
        await s.execute(
            text(
                "INSERT INTO subagent_spawns (tenant_id, parent_run_id, parent_session_id, "
                "child_session_id, child_run_id, task, status, label, child_session_key, "
                "tool_call_id) SELECT tenant_id, :p, (SELECT session_id FROM agent_run_queue "
                "WHERE id = :p), session_id, id, 'count', 'running', 'counter', 'k:sub:1', 'c1' "
                "FROM agent_run_queue WHERE id = :c"
            ),
            {"p": parent, "c": child},
        )


async def _family(db: Database, alice: Principal) -> tuple[RunQueue, UUID, UUID]:
    """A queued parent run (session `k`) and its spawned child (session `k:sub:1`)."""
    queue = RunQueue(db)
    parent = (await queue.enqueue_run(alice, message="p", session_key="k")).run_id
    child = (await queue.enqueue_run(alice, message="c", session_key="k:sub:1")).run_id
    await _spawn(db, alice, parent, child)
    return queue, parent, child


async def _rows(db: Database, alice: Principal, sql: str, **params: Any) -> list[Any]:
    async with db.tenant(alice) as s:
        return list((await s.execute(text(sql), params)).all())


async def _types(db: Database, alice: Principal, run_id: UUID) -> list[str]:
    rows = await _rows(
        db, alice, "SELECT type FROM run_events WHERE run_id = :r ORDER BY seq", r=run_id
    )
    return [r.type for r in rows]


async def test_child_outcome_reaches_a_live_parent_once(
    database: Database, alice: Principal
) -> None:
    queue, parent, child = await _family(database, alice)
    parent_lease = await _claim(queue, parent, "w1")
    child_lease = await _claim(queue, child, "w2")

    await child_lease.finish("completed", result={"text": "3"})

    [item] = await _rows(database, alice, "SELECT * FROM run_inbox WHERE run_id = :r", r=parent)
    assert item.kind == "subagent" and item.source_run_id == child and item.delivered_at is None
    assert item.text == f"[sub-agent counter completed (run {child})]\n3"
    assert item.payload["status"] == "completed" and item.payload["result"] == {"text": "3"}
    [spawn] = await _rows(database, alice, "SELECT * FROM subagent_spawns")
    assert spawn.status == "completed" and spawn.result == {"text": "3"}
    assert (await _types(database, alice, parent))[-1] == "subagent.completed"
    assert (await _types(database, alice, child))[-1] == "run.completed"

    # the parent finishes without having read it: the message becomes a follow-up run
    await parent_lease.finish("completed", result={"text": "done"})
    [item] = await _rows(database, alice, "SELECT * FROM run_inbox WHERE run_id = :r", r=parent)
    assert item.delivery == "followup" and item.delivered_to_run_id is not None
    [follow] = await _rows(
        database,
        alice,
        "SELECT * FROM agent_run_queue WHERE id = :r",
        r=item.delivered_to_run_id,
    )
    assert follow.status == "queued" and follow.session_id == spawn.parent_session_id
    assert follow.input["message"] == item.text
    assert follow.input["followUp"] == {
        "kind": "subagent",
        "ofRunId": str(parent),
        "sourceRunId": str(child),
    }
    assert await _types(database, alice, follow.id) == ["run.queued"]


async def test_child_ending_after_its_parent_queues_one_follow_up(
    database: Database, alice: Principal
) -> None:
    queue, parent, child = await _family(database, alice)
    parent_lease = await _claim(queue, parent, "w1")
    child_lease = await _claim(queue, child, "w2")
    await parent_lease.finish("completed", result={"text": "done"})

    await child_lease.finish("failed", error={"code": "run_timeout", "message": "too slow"})

    [spawn] = await _rows(database, alice, "SELECT * FROM subagent_spawns")
    assert spawn.status == "timed_out"
    runs = await _rows(
        database,
        alice,
        "SELECT * FROM agent_run_queue WHERE session_id = :s ORDER BY queue_seq",
        s=spawn.parent_session_id,
    )
    assert [r.status for r in runs] == ["completed", "queued"]
    assert runs[1].input["message"].endswith("run_timeout: too slow")
    assert await _types(database, alice, runs[1].id) == ["run.queued", "subagent.completed"]
    assert (await _types(database, alice, parent))[-1] == "run.completed"  # nothing after the end


async def test_cancelling_a_parent_cancels_its_idle_child_and_drops_the_outcome(
    database: Database, alice: Principal
) -> None:
    queue, parent, child = await _family(database, alice)

    assert await queue.cancel(alice, parent) == "cancelled"

    [c] = await _rows(database, alice, "SELECT * FROM agent_run_queue WHERE id = :r", r=child)
    assert c.status == "cancelled" and c.error["message"] == "parent run cancelled"
    assert await _types(database, alice, child) == ["run.queued", "run.cancelled"]
    assert await _types(database, alice, parent) == ["run.queued", "run.cancelled"]
    [item] = await _rows(database, alice, "SELECT * FROM run_inbox")
    assert item.delivery == "dropped"
    [spawn] = await _rows(database, alice, "SELECT * FROM subagent_spawns")
    assert spawn.status == "cancelled"


async def test_cancelling_a_parent_asks_its_running_child_to_stop(
    database: Database, alice: Principal
) -> None:
    queue, parent, child = await _family(database, alice)
    parent_lease = await _claim(queue, parent, "w1")
    await _claim(queue, child, "w2")

    assert await queue.cancel(alice, parent) == "running"  # a request: its worker stops it
    await parent_lease.finish("cancelled", error={"code": "cancelled", "message": "stop"})

    [c] = await _rows(database, alice, "SELECT * FROM agent_run_queue WHERE id = :r", r=child)
    assert c.status == "running" and c.cancel_requested_at is not None


async def test_a_steering_message_that_arrives_too_late_becomes_a_run(
    database: Database, alice: Principal
) -> None:
    queue = RunQueue(database)
    run = (await queue.enqueue_run(alice, message="p", session_key="k")).run_id
    lease = await _claim(queue, run)
    async with database.tenant(alice) as s:
        await s.execute(
            text(
                "INSERT INTO run_inbox (tenant_id, run_id, kind, text) "
                "SELECT tenant_id, id, 'steer', 'also this' FROM agent_run_queue WHERE id = :r"
            ),
            {"r": run},
        )
    await lease.finish("cancelled", error={"code": "cancelled", "message": "stop"})
    runs = await _rows(database, alice, "SELECT * FROM agent_run_queue ORDER BY queue_seq")
    assert [r.status for r in runs] == ["cancelled", "queued"]
    assert runs[1].input["message"] == "also this"
    assert runs[1].input["followUp"]["kind"] == "steer"


async def test_every_call_keeps_a_result_however_the_run_ends(
    database: Database, alice: Principal
) -> None:
    """Calls left open (parked, cut short) get a stored failed result in the ending transaction:
    a run cancelled while idle (no worker to write them), and one failed by its worker."""
    queue = RunQueue(database)
    for key, ending in (("idle", "cancel"), ("worker", "fail")):
        run = (await queue.enqueue_run(alice, message="m", session_key=key)).run_id
        lease = await _claim(queue, run)
        calls = [ToolCall(id=f"{key}-1", name="read_file"), ToolCall(id=f"{key}-2", name="x")]
        done = ToolResult(tool_call_id=f"{key}-1", name="read_file", ok=True, result="ok")
        await append_messages(
            lease, [UserMessage(text="m"), AssistantMessage(tool_calls=calls), done]
        )
        if ending == "cancel":
            await lease.hand_back()
            assert await queue.cancel(alice, run) == "cancelled"
        else:
            await lease.finish("failed", error={"code": "run_timeout", "message": "late"})
        rows = await _rows(
            database,
            alice,
            "SELECT payload FROM session_messages WHERE run_id = :r ORDER BY seq",
            r=run,
        )
        results = [load_message(r.payload) for r in rows if r.payload["kind"] == "tool_result"]
        assert [r.tool_call_id for r in results] == [f"{key}-1", f"{key}-2"]
        closed = results[1]
        assert isinstance(closed, ToolResult) and not closed.ok and closed.name == "x"
        expected = "cancelled: the run was stopped" if ending == "cancel" else "failed: the run"
        assert closed.error is not None and closed.error.startswith(expected)
        [session] = await _rows(
            database,
            alice,
            "SELECT message_count FROM agent_sessions WHERE session_key = :k",
            k=key,
        )
        assert session.message_count == 4
