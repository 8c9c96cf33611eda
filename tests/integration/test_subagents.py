"""Sub-agents end to end: `sessions_spawn` and `sessions_wait` driven by the offline model through
a real worker, the outcome reaching the parent (tool result, injected message, follow-up run), the
limits, the policy ceiling, cascade cancel, a child's deadline and the children endpoints."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import select, text

from app.auth.principal import Principal
from app.db.engine import Database
from app.db.models import Run, RunEvent, RunInboxItem, SubagentSpawn
from tests.integration.api_support import Api, auth, make_settings, running_api
from tests.integration.policy_support import (
    SleepTool,
    catalog_with,
    default_agent_id,
    run_events,
    running_worker,
    set_policy,
    tool_line,
    wait_status,
    worker_settings,
)
from tests.integration.run_support import create_agent

ENDED = {"completed", "failed", "cancelled"}


@pytest.fixture
async def api(db_url: str, database: Database, alice: Principal) -> AsyncIterator[Api]:
    await set_policy(database, alice, allow=["group:sessions"])  # coding + the sessions tools
    async with running_api(make_settings(db_url), database) as api:
        yield api


def spawn_line(task: str, **args: Any) -> str:
    return tool_line("sessions_spawn", task=task, **args)


async def spawned_children(db: Database, who: Principal, run_id: UUID) -> list[dict[str, Any]]:
    return [d for t, d in await run_events(db, who, run_id) if t == "subagent.spawned"]


async def wait_children(
    db: Database,
    who: Principal,
    run_id: UUID,
    n: int,
    timeout: float = 10,  # noqa: ASYNC109
) -> list[UUID]:
    for _ in range(int(timeout / 0.05)):
        found = await spawned_children(db, who, run_id)
        if len(found) >= n:
            return [UUID(d["childRunId"]) for d in found]
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} spawned fewer than {n} children")


async def result_text(db: Database, who: Principal, run_id: UUID) -> str:
    async with db.tenant(who) as s:
        run = await s.get(Run, run_id)
    assert run is not None and run.result is not None, run
    return str(run.result["text"])


async def tool_outcomes(db: Database, who: Principal, run_id: UUID) -> list[tuple[str, Any]]:
    """(tool.completed | tool.failed, result | error) of the run's calls, in order."""
    return [
        (t, d.get("result", d.get("error")))
        for t, d in await run_events(db, who, run_id)
        if t in ("tool.completed", "tool.failed")
    ]


async def set_agent_settings(db: Database, who: Principal, agent_id: UUID, **values: Any) -> None:
    async with db.tenant(who) as s:
        await s.execute(
            text("UPDATE agents SET settings = settings || CAST(:v AS jsonb) WHERE id = :id"),
            {"v": json.dumps(values), "id": agent_id},
        )


async def test_spawn_and_wait_returns_the_childs_answer(
    api: Api, database: Database, db_url: str, alice: Principal
) -> None:
    message = "\n".join(
        [spawn_line("/answer 42", label="calc"), tool_line("sessions_wait", timeoutSeconds=30)]
    )
    async with running_worker(database, worker_settings(db_url), "w1"):
        run = await api.post_run(message, sessionKey="boss")
        run_id = UUID(run["runId"])
        assert await wait_status(database, alice, run_id, ENDED) == "completed"

    [child] = await wait_children(database, alice, run_id, 1)
    assert await result_text(database, alice, child) == "42"
    answer = await result_text(database, alice, run_id)
    assert '"result": "42"' in answer.splitlines()[1]  # the wait's result, as summarised

    outcomes = await tool_outcomes(database, alice, run_id)
    assert [t for t, _ in outcomes] == ["tool.completed", "tool.completed"]
    spawned, waited = outcomes[0][1], outcomes[1][1]
    assert spawned == {"childSessionKey": spawned["childSessionKey"], "runId": str(child)}
    assert spawned["childSessionKey"].startswith("boss:sub:")
    assert waited["pending"] == []
    assert waited["results"] == [
        {
            "label": "calc",
            "status": "completed",
            "result": "42",
            "childRunId": str(child),
            "childSessionKey": spawned["childSessionKey"],
        }
    ]
    types = [t for t, _ in await run_events(database, alice, run_id)]
    assert "subagent.spawned" in types and "subagent.completed" in types
    async with database.tenant(alice) as s:
        [item] = list(await s.scalars(select(RunInboxItem).where(RunInboxItem.run_id == run_id)))
    assert (item.delivery, item.source_run_id) == ("tool", child)

    # the children endpoint and /status
    r = await api.client.get(f"/api/agent-runtime/runs/{run_id}/children", headers=auth())
    assert r.status_code == 200, r.text
    tree = r.json()
    assert tree["runId"] == str(run_id)
    [node] = tree["children"]
    assert node["runId"] == str(child) and node["label"] == "calc"
    assert (node["status"], node["result"], node["error"]) == ("completed", {"text": "42"}, None)
    assert node["task"] == "/answer 42" and node["children"] == []
    assert node["sessionKey"] == spawned["childSessionKey"] and node["finishedAt"] is not None
    assert node["agentId"] == str(await default_agent_id(database, alice))
    r = await api.client.get(
        "/api/agent-runtime/status", params={"runId": str(run_id)}, headers=auth()
    )
    assert r.json()["children"] == [
        {
            "runId": str(child),
            "sessionKey": spawned["childSessionKey"],
            "label": "calc",
            "status": "completed",
        }
    ]
    r = await api.client.get(
        "/api/agent-runtime/status", params={"runId": str(child)}, headers=auth()
    )
    assert r.json()["children"] == []

    # another tenant sees nothing
    r = await api.client.get(f"/api/agent-runtime/runs/{run_id}/children", headers=auth("mallory"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = await api.client.get(f"/api/agent-runtime/runs/{UUID(int=7)}/children", headers=auth())
    assert r.status_code == 404


async def test_the_tree_shows_grandchildren(
    api: Api, database: Database, db_url: str, alice: Principal
) -> None:
    inner = spawn_line("/answer deep", label="grandchild")
    child_task = "\n".join([inner, tool_line("sessions_wait", timeoutSeconds=30)])
    message = "\n".join(
        [spawn_line(child_task, label="child"), tool_line("sessions_wait", timeoutSeconds=30)]
    )
    async with running_worker(database, worker_settings(db_url), "w1"):
        run_id = UUID((await api.post_run(message))["runId"])
        assert await wait_status(database, alice, run_id, ENDED) == "completed"
    r = await api.client.get(f"/api/agent-runtime/runs/{run_id}/children", headers=auth())
    [child] = r.json()["children"]
    assert (child["label"], child["status"]) == ("child", "completed")
    [grandchild] = child["children"]
    assert (grandchild["label"], grandchild["status"]) == ("grandchild", "completed")
    assert grandchild["result"] == {"text": "deep"} and grandchild["children"] == []
    async with database.tenant(alice) as s:
        depths = sorted((await s.scalars(select(SubagentSpawn.depth))).all())
    assert depths == [1, 2]


async def test_an_outcome_is_injected_into_a_running_parent(
    api: Api, database: Database, db_url: str, alice: Principal
) -> None:
    message = "\n".join([spawn_line("/answer 42", label="calc"), tool_line("pause", ms=2500)])
    catalog = catalog_with(SleepTool("pause"))
    async with running_worker(database, worker_settings(db_url), "w1", catalog=catalog):
        run_id = UUID((await api.post_run(message))["runId"])
        assert await wait_status(database, alice, run_id, ENDED, timeout=15) == "completed"
    [child] = await wait_children(database, alice, run_id, 1)
    assert await result_text(database, alice, run_id) == (
        f"Noted: [sub-agent calc completed (run {child})]"
    )
    [injected] = [
        d for t, d in await run_events(database, alice, run_id) if t == "message.injected"
    ]
    assert injected["source"] == "subagent" and injected["fromRunId"] == str(child)
    assert injected["text"] == f"[sub-agent calc completed (run {child})]\n42"
    async with database.tenant(alice) as s:
        [item] = list(await s.scalars(select(RunInboxItem).where(RunInboxItem.run_id == run_id)))
    assert item.delivery == "injected"


async def test_an_outcome_after_the_parent_ended_is_a_follow_up_run(
    api: Api, database: Database, db_url: str, alice: Principal
) -> None:
    message = spawn_line("/sleep 1500\n/answer late", label="slow")
    async with running_worker(database, worker_settings(db_url), "w1"):
        run_id = UUID((await api.post_run(message, sessionKey="lane"))["runId"])
        assert await wait_status(database, alice, run_id, ENDED) == "completed"
        [child] = await wait_children(database, alice, run_id, 1)
        assert await wait_status(database, alice, child, ENDED) == "completed"
        async with database.tenant(alice) as s:
            parent = await s.get(Run, run_id)
            assert parent is not None
            runs = list(
                await s.scalars(
                    select(Run).where(Run.session_id == parent.session_id).order_by(Run.queue_seq)
                )
            )
        assert len(runs) == 2
        follow = runs[1]
        assert follow.input["followUp"]["kind"] == "subagent"
        assert await wait_status(database, alice, follow.id, ENDED) == "completed"
    assert await result_text(database, alice, follow.id) == (
        f"Noted: [sub-agent slow completed (run {child})]"
    )


async def test_spawn_limits_are_tool_errors(
    api: Api, database: Database, db_url: str, alice: Principal
) -> None:
    agent = await default_agent_id(database, alice)
    await set_agent_settings(database, alice, agent, maxChildrenPerRun=1, maxSpawnDepth=1)
    per_run = "\n".join([spawn_line("/answer a"), spawn_line("/answer b")])
    depth = spawn_line(spawn_line("/answer too deep"))
    async with running_worker(database, worker_settings(db_url), "w1"):
        first = UUID((await api.post_run(per_run))["runId"])
        second = UUID((await api.post_run(depth))["runId"])
        assert await wait_status(database, alice, first, ENDED) == "completed"
        assert await wait_status(database, alice, second, ENDED) == "completed"
        [child] = await wait_children(database, alice, second, 1)
        assert await wait_status(database, alice, child, ENDED) == "completed"

    outcomes = await tool_outcomes(database, alice, first)
    assert [t for t, _ in outcomes] == ["tool.completed", "tool.failed"]
    assert outcomes[1][1] == "sub-agent limit reached: a run may spawn at most 1"
    [(kind, error)] = await tool_outcomes(database, alice, child)
    assert kind == "tool.failed"
    assert error == (
        "spawn depth limit reached: this run is at depth 1 and sub-agents may nest at most 1 deep"
    )
    async with database.tenant(alice) as s:
        assert len((await s.scalars(select(SubagentSpawn))).all()) == 2


async def test_the_tenants_live_children_are_capped(
    api: Api, database: Database, db_url: str, alice: Principal
) -> None:
    message = "\n".join([spawn_line("/sleep 20000"), spawn_line("/sleep 20000")])
    settings = worker_settings(db_url, subagent_max_concurrent_per_tenant=1)
    async with running_worker(database, settings, "w1"):
        run_id = UUID((await api.post_run(message))["runId"])
        assert await wait_status(database, alice, run_id, ENDED) == "completed"
        outcomes = await tool_outcomes(database, alice, run_id)
        [child] = await wait_children(database, alice, run_id, 1)
        r = await api.client.post(
            "/api/agent-runtime/cancel", params={"runId": str(child)}, headers=auth()
        )
        assert r.status_code == 200
        await wait_status(database, alice, child, {"cancelled"})
    assert [t for t, _ in outcomes] == ["tool.completed", "tool.failed"]
    assert outcomes[1][1].startswith("too many sub-agents running: at most 1 may be")


async def test_a_childs_tools_never_exceed_its_parents(
    api: Api, database: Database, db_url: str, alice: Principal
) -> None:
    boss = UUID(await create_agent(api, "boss"))
    coder = UUID(await create_agent(api, "coder"))
    await set_policy(database, alice, agent_id=boss, profile="minimal")
    write = tool_line("write_file", path="x.txt", content="hi")
    message = spawn_line(write, agentId=str(coder), label="coder")
    async with running_worker(database, worker_settings(db_url), "w1"):
        # the coder alone may write
        alone = UUID((await api.post_run(write, agentId=str(coder)))["runId"])
        assert await wait_status(database, alice, alone, ENDED) == "completed"
        run_id = UUID((await api.post_run(message, agentId=str(boss)))["runId"])
        assert await wait_status(database, alice, run_id, ENDED) == "completed"
        [child] = await wait_children(database, alice, run_id, 1)
        assert await wait_status(database, alice, child, ENDED) == "completed"

    assert [t for t, _ in await tool_outcomes(database, alice, alone)] == ["tool.completed"]
    [(kind, error)] = await tool_outcomes(database, alice, child)
    assert kind == "tool.failed"
    assert error.startswith(
        "tool 'write_file' is not allowed for this agent: not allowed to the run that spawned "
        "this sub-agent (not in the agent profile 'minimal'"
    )
    async with database.tenant(alice) as s:
        spawned = await s.get(Run, child)
    assert spawned is not None and spawned.agent_id == coder


async def test_cancelling_the_parent_cancels_its_running_child(
    api: Api, database: Database, db_url: str, alice: Principal
) -> None:
    message = "\n".join([spawn_line("/sleep 30000"), tool_line("sessions_wait")])
    async with running_worker(database, worker_settings(db_url), "w1"):
        run_id = UUID((await api.post_run(message))["runId"])
        [child] = await wait_children(database, alice, run_id, 1)
        await wait_status(database, alice, child, {"running"})
        await wait_status(database, alice, run_id, {"waiting"})
        r = await api.client.post(
            "/api/agent-runtime/cancel", params={"runId": str(run_id)}, headers=auth()
        )
        assert r.json()["status"] == "cancelled"
        assert await wait_status(database, alice, child, ENDED, timeout=5) == "cancelled"
    async with database.tenant(alice) as s:
        [spawn] = (await s.scalars(select(SubagentSpawn))).all()
        [item] = (await s.scalars(select(RunInboxItem))).all()
    assert spawn.status == "cancelled"
    assert item.delivery == "dropped"  # the parent was cancelled: nobody to tell


async def test_a_child_queued_past_its_deadline_fails(
    api: Api, database: Database, db_url: str, alice: Principal
) -> None:
    # one slot: the parent holds it while the child waits in the queue past its deadline
    message = "\n".join(
        [spawn_line("/answer never", timeoutSeconds=1, label="late"), "/sleep 2500"]
    )
    settings = worker_settings(db_url, worker_concurrency=1)
    async with running_worker(database, settings, "w1"):
        run_id = UUID((await api.post_run(message))["runId"])
        [child] = await wait_children(database, alice, run_id, 1)
        assert await wait_status(database, alice, child, ENDED, timeout=5) == "failed"
        assert await run_status_of(database, alice, run_id) == "running"  # still sleeping
        await wait_status(database, alice, run_id, ENDED)
    async with database.tenant(alice) as s:
        failed = await s.get(Run, child)
        [spawn] = (await s.scalars(select(SubagentSpawn))).all()
    assert failed is not None and failed.started_at is None  # never claimed
    assert failed.error is not None and failed.error["code"] == "run_timeout"
    assert spawn.status == "timed_out" and spawn.timeout_seconds == 1
    child_events = await run_events(database, alice, child)
    assert [t for t, _ in child_events] == ["run.queued", "run.failed"]
    assert child_events[1][1]["error"]["code"] == "run_timeout"
    r = await api.client.get(f"/api/agent-runtime/runs/{run_id}/children", headers=auth())
    [node] = r.json()["children"]
    assert node["status"] == "timed_out" and node["error"]["code"] == "run_timeout"


async def run_status_of(db: Database, who: Principal, run_id: UUID) -> str:
    async with db.tenant(who) as s:
        status = await s.scalar(select(Run.status).where(Run.id == run_id))
    assert status is not None
    return status


async def test_a_parked_wait_times_out_and_the_run_goes_on(
    api: Api, database: Database, db_url: str, alice: Principal
) -> None:
    message = "\n".join(
        [
            spawn_line("/sleep 4000\n/answer slow", label="s"),
            tool_line("sessions_wait", timeoutSeconds=1),
        ]
    )
    async with running_worker(database, worker_settings(db_url), "w1"):
        run_id = UUID((await api.post_run(message))["runId"])
        [child] = await wait_children(database, alice, run_id, 1)
        assert await wait_status(database, alice, run_id, {"waiting"}) == "waiting"
        assert await wait_status(database, alice, run_id, ENDED, timeout=5) == "completed"
        assert await run_status_of(database, alice, child) == "running"  # the child goes on
        await wait_status(database, alice, child, ENDED)
    [_, (kind, waited)] = await tool_outcomes(database, alice, run_id)
    assert kind == "tool.completed"
    assert waited == {"results": [], "pending": [str(child)], "timedOut": True}
    states = [d["to"] for t, d in await all_events(database, alice, run_id) if t == "state.changed"]
    assert "waiting" in states


async def all_events(
    db: Database, who: Principal, run_id: UUID
) -> list[tuple[str, dict[str, Any]]]:
    async with db.tenant(who) as s:
        rows = await s.scalars(
            select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.seq)
        )
        return [(r.type, r.data) for r in rows]
