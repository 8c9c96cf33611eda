"""Plan mode end to end through the HTTP API, driven by the offline model.

A plan-mode agent is created with `POST /agents`, a message is posted with its `agentId`, the
run is claimed and executed like a worker would (`execute_run` on a `LeasedRun`), and what the
run did is read back over `/runs/{runId}/events`, the SSE stream and the session transcript.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.core import events as ev
from app.core.transcript import UserMessage
from app.db.engine import Database
from app.llm.base import Model
from app.runtime.loop import execute_run
from app.runtime.plan_protocol import MAX_REVISIONS
from tests.integration.api_support import Api, auth, make_settings, running_api
from tests.integration.run_support import (
    Recording,
    claim,
    crash_and_resume,
    create_agent,
    events,
    of_type,
    registry_of,
    states_of,
    status,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def api(database: Database, db_url: str) -> AsyncIterator[Api]:
    async with running_api(make_settings(db_url), database) as api:
        yield api


async def plan_agent(api: Api, name: str = "planner", **body: Any) -> str:
    """A plan-mode agent."""
    return await create_agent(api, name, mode="plan", **body)


async def run_plan(
    api: Api, message: str, *, model: Model | None = None, name: str = "planner", **agent: Any
) -> str:
    """Create a plan agent, post `message` to it and execute the run to its end; the run id."""
    agent_id = await plan_agent(api, name, **agent)
    run = await api.post_run(message, agentId=agent_id)
    leased = await claim(api, run["runId"])
    models = registry_of(model) if model is not None else None
    await execute_run(leased, settings=api.runtime.settings, models=models)
    run_id: str = run["runId"]
    return run_id


def steps_of(found: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(e["index"], e["status"]) for e in of_type(found, ev.PLAN_STEP)]


async def transcript(api: Api, run_id: str) -> list[dict[str, Any]]:
    session_key = (await status(api, run_id))["sessionKey"]
    r = await api.client.get(f"/api/agent-runtime/sessions/{session_key}/messages", headers=auth())
    return [m["payload"] for m in r.json()["messages"] if m["runId"] == run_id]


# ------------------------------------------------------------------ the happy path


async def test_plan_run_end_to_end(api: Api) -> None:
    run_id = await run_plan(api, "/plan step one; step two")
    found = await events(api, run_id)

    [created] = of_type(found, ev.PLAN_CREATED)
    assert created["plan"] == {
        "steps": [
            {"index": 1, "description": "step one", "tools": [], "status": "pending"},
            {"index": 2, "description": "step two", "tools": [], "status": "pending"},
        ]
    }
    assert steps_of(found) == [(1, "running"), (1, "done"), (2, "running"), (2, "done")]
    assert states_of(found) == [
        ("queued", "planning"),
        ("planning", "thinking"),
        ("thinking", "responding"),
        ("responding", "thinking"),
        ("thinking", "responding"),
        ("responding", "completed"),
    ]
    order = [e["type"] for e in found]
    assert order[:3] == [ev.RUN_QUEUED, ev.RUN_STARTED, ev.STATE_CHANGED]
    assert order[-1] == ev.RUN_COMPLETED
    assert order.index(ev.PLAN_CREATED) < order.index(ev.PLAN_STEP)
    # the plan's JSON is not streamed; each step's answer is
    plan_deltas = order[: order.index(ev.PLAN_CREATED)].count(ev.ASSISTANT_DELTA)
    assert plan_deltas == 0 and order.count(ev.USAGE) == 3

    answer = "Step 1 done: step one\n\nStep 2 done: step two"
    assert found[-1]["result"] == {"text": answer}
    run = await status(api, run_id)
    assert run["status"] == "completed" and run["result"] == {"text": answer}
    assert run["state"] is None

    stored = await transcript(api, run_id)
    assert [(m["kind"], m.get("step"), "plan" in m) for m in stored] == [
        ("user", None, False),
        ("assistant", None, True),
        ("user", 1, False),
        ("assistant", None, False),
        ("user", 2, False),
        ("assistant", None, False),
    ]
    assert stored[1]["text"] == "Plan:\n1. step one\n2. step two"
    assert "step 1 of the plan: step one" in stored[2]["text"]

    async with api.stream({"runId": run_id}, auth()) as sse:  # the stream replays the same
        frames = await sse.read_to_end()
    assert [f.event for f in frames] == [e["type"] for e in found]


async def test_steps_with_tools(api: Api) -> None:
    write = json.dumps({"path": "a.txt", "content": "hello plan"})
    read = json.dumps({"path": "a.txt"})
    run_id = await run_plan(
        api, f"/plan write it /tool write_file {write}; read it /tool read_file {read}"
    )
    found = await events(api, run_id)
    [created] = of_type(found, ev.PLAN_CREATED)
    assert [(s["description"], s["tools"]) for s in created["plan"]["steps"]] == [
        ("write it", ["write_file"]),
        ("read it", ["read_file"]),
    ]
    assert steps_of(found) == [(1, "running"), (1, "done"), (2, "running"), (2, "done")]
    completed = of_type(found, ev.TOOL_COMPLETED)
    assert [t["name"] for t in completed] == ["write_file", "read_file"]
    assert completed[1]["result"]["content"] == "hello plan"
    order = [e["type"] if e["type"] != ev.PLAN_STEP else (e["index"], e["status"]) for e in found]
    assert order.index((1, "running")) < order.index(ev.TOOL_STARTED) < order.index((1, "done"))
    assert ("observing", "thinking") in states_of(found)
    result = found[-1]["result"]["text"]
    assert result.startswith("Step 1 done: write it\nwrite_file ok:")
    assert "Step 2 done: read it\nread_file ok:" in result


async def test_a_message_without_plan_directives_gets_a_one_step_plan(api: Api) -> None:
    run_id = await run_plan(api, "just do it")
    found = await events(api, run_id)
    [created] = of_type(found, ev.PLAN_CREATED)
    assert [s["description"] for s in created["plan"]["steps"]] == ["Answer the request"]
    assert found[-1]["type"] == ev.RUN_COMPLETED


# ------------------------------------------------------------------ invalid plans


async def test_malformed_plan_is_reasked_once_then_fails_plan_invalid(api: Api) -> None:
    model = Recording()
    run_id = await run_plan(api, "/plan-invalid\n/plan a; b", model=model)
    found = await events(api, run_id)
    invalid = of_type(found, ev.PLAN_INVALID)
    assert [e["attempt"] for e in invalid] == [1, 2]
    assert "not valid JSON" in invalid[0]["error"]
    assert of_type(found, ev.PLAN_CREATED) == []
    assert [r.purpose for r in model.requests] == ["plan", "plan"]
    reask = model.requests[1].messages[-1]
    assert isinstance(reask, UserMessage) and invalid[0]["error"] in reask.text
    assert model.requests[0].response_schema is not None
    assert model.requests[0].tools == () and model.requests[1].tools == ()

    run = await status(api, run_id)
    assert run["status"] == "failed" and run["error"]["code"] == "plan_invalid"
    assert "did not produce a valid plan (asked 2 times)" in run["error"]["message"]
    assert states_of(found) == [("queued", "planning"), ("planning", "failed")]
    assert [m["kind"] for m in await transcript(api, run_id)] == ["user"]


async def test_malformed_plan_then_a_valid_one(api: Api) -> None:
    run_id = await run_plan(api, "/plan-invalid-once\n/plan only step")
    found = await events(api, run_id)
    assert [e["attempt"] for e in of_type(found, ev.PLAN_INVALID)] == [1]
    assert len(of_type(found, ev.PLAN_CREATED)) == 1
    assert found[-1]["result"] == {"text": "Step 1 done: only step"}


# ------------------------------------------------------------------ failing steps


async def test_a_failing_step_revises_the_plan(api: Api) -> None:
    missing = json.dumps({"path": "missing.txt"})
    message = f"/plan read it /tool read_file {missing}; never reached\n/replan explain; finish"
    run_id = await run_plan(api, message)
    found = await events(api, run_id)

    [failed] = [e for e in of_type(found, ev.PLAN_STEP) if e["status"] == "failed"]
    assert failed["index"] == 1 and "read_file failed" in failed["reason"]
    [updated] = of_type(found, ev.PLAN_UPDATED)
    assert updated["revision"] == 1 and updated["reason"].startswith("step 1 failed: read_file")
    assert [(s["index"], s["description"], s["status"]) for s in updated["plan"]["steps"]] == [
        (1, "read it", "failed"),
        (2, "never reached", "skipped"),
        (3, "explain", "pending"),
        (4, "finish", "pending"),
    ]
    assert steps_of(found) == [
        (1, "running"),
        (1, "failed"),
        (2, "skipped"),
        (3, "running"),
        (3, "done"),
        (4, "running"),
        (4, "done"),
    ]
    assert ("observing", "thinking") in states_of(found)
    assert ("responding", "planning") in states_of(found)  # the revision
    assert found[-1]["result"] == {"text": "Step 3 done: explain\n\nStep 4 done: finish"}
    revised = [m for m in await transcript(api, run_id) if "plan" in m]
    assert [m["plan"]["revision"] for m in revised] == [0, 1]
    assert revised[1]["text"].startswith("Revised plan (step 1 failed: read_file failed")


async def test_revisions_are_bounded(api: Api) -> None:
    missing = json.dumps({"path": "missing.txt"})
    message = f"/plan again /tool read_file {missing}\n/replan again"
    run_id = await run_plan(api, message)
    found = await events(api, run_id)
    assert len(of_type(found, ev.PLAN_UPDATED)) == MAX_REVISIONS
    assert [s for s in steps_of(found) if s[1] == "failed"] == [
        (i, "failed") for i in range(1, MAX_REVISIONS + 2)
    ]
    run = await status(api, run_id)
    assert run["status"] == "failed" and run["error"]["code"] == "plan_step_failed"
    assert run["error"]["message"].startswith(f"step {MAX_REVISIONS + 1} of the plan failed")


async def test_max_turns_count_per_step(api: Api) -> None:
    write = json.dumps({"path": "x", "content": "y"})
    # each step takes two turns (call, summary); a limit of 2 turns per step suffices for three
    run_id = await run_plan(
        api, f"/plan a /tool write_file {write}; b; c /tool list_files", maxTurns=2
    )
    assert (await status(api, run_id))["status"] == "completed"
    run_id = await run_plan(api, f"/plan a /tool write_file {write}", name="p2", maxTurns=1)
    run = await status(api, run_id)
    assert run["status"] == "failed" and run["error"]["code"] == "max_turns_exceeded"
    assert "step 1 of the plan" in run["error"]["message"]


# ------------------------------------------------------------------ resumption


async def test_resume_mid_plan_does_not_rerun_finished_steps(api: Api) -> None:
    write = json.dumps({"path": "one.txt", "content": "1"})
    agent_id = await plan_agent(api)
    run = await api.post_run(
        f"/plan first /tool write_file {write}; second; third", agentId=agent_id
    )
    dead = await claim(api, run["runId"])
    first = Recording(block_at=2)
    task = asyncio.create_task(
        execute_run(dead, settings=api.runtime.settings, models=registry_of(first))
    )
    await asyncio.wait_for(first.blocked.wait(), 10)
    task.cancel()  # the worker dies while step 2's model call is in flight
    with pytest.raises(asyncio.CancelledError):
        await task

    second = Recording()
    alive = await crash_and_resume(api, dead)
    await execute_run(alive, settings=api.runtime.settings, models=registry_of(second))

    # the resumed attempt neither plans again nor goes back to step 1
    assert all(r.purpose == "chat" for r in second.requests)
    steps_asked = {
        next(m.step for m in reversed(r.messages) if isinstance(m, UserMessage))
        for r in second.requests
    }
    assert steps_asked == {2, 3}
    found = await events(api, run["runId"])
    assert len(of_type(found, ev.PLAN_CREATED)) == 1
    assert steps_of(found) == [
        (1, "running"),
        (1, "done"),
        (2, "running"),  # stored once: the resumed attempt continues the running step
        (2, "done"),
        (3, "running"),
        (3, "done"),
    ]
    assert [e["name"] for e in of_type(found, ev.TOOL_STARTED)] == ["write_file"]
    resumed_at = [e["type"] for e in found].index(ev.RUN_RESUMED)
    assert states_of(found[resumed_at:])[0] == ("queued", "thinking")
    result = (await status(api, run["runId"]))["result"]["text"]
    assert result.count("Step 1 done") == 1 and result.endswith("Step 3 done: third")
    kinds = [(m["kind"], m.get("step")) for m in await transcript(api, run["runId"])]
    assert kinds.count(("user", 1)) == 1 and kinds.count(("user", 2)) == 1
