"""A plan-mode run end to end: real API and worker processes, the offline model, Postgres.

A plan-mode agent is created over the agents API, a message with the offline model's `/plan`
directive is posted to it, and the SSE stream must show the plan, each step running then done,
the state machine's moves and the run's completion; `/status` agrees.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Stack

pytestmark = pytest.mark.e2e

MESSAGE = '/plan step one; step two /tool write_file {"path": "plan.txt", "content": "done"}'


def of_type(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == type_]


def test_plan_mode_run_streams_plan_steps_and_states(stack: Stack) -> None:
    r = httpx.post(
        f"{stack.base_url}/api/agent-runtime/agents",
        json={"name": "planner", "mode": "plan", "model": "offline", "maxTurns": 4},
        headers=stack.headers(),
        timeout=10,
    )
    assert r.status_code == 201, r.text
    agent = r.json()
    assert (agent["mode"], agent["model"]) == ("plan", "offline")

    run = stack.post(MESSAGE, agentId=agent["id"])
    events = stack.stream(run["runId"])
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert types[:2] == ["run.queued", "run.started"] and types[-1] == "run.completed"
    assert "run.failed" not in types and "plan.invalid" not in types

    [created] = of_type(events, "plan.created")
    assert created["plan"]["steps"] == [
        {"index": 1, "description": "step one", "tools": [], "status": "pending"},
        {"index": 2, "description": "step two", "tools": ["write_file"], "status": "pending"},
    ]
    steps = [(e["index"], e["status"]) for e in of_type(events, "plan.step")]
    assert steps == [(1, "running"), (1, "done"), (2, "running"), (2, "done")]
    assert types.index("plan.created") < types.index("plan.step")

    moves = [(e["from"], e["to"]) for e in of_type(events, "state.changed")]
    assert moves[0] == ("queued", "planning") and moves[-1][1] == "completed"
    assert ("planning", "thinking") in moves  # step 1's turn after the plan
    assert ("thinking", "tool_calling") in moves and ("tool_calling", "observing") in moves
    visited = {to for _, to in moves}
    assert {"planning", "thinking", "responding", "tool_calling", "observing"} <= visited
    for (_, to), (after, _) in zip(moves, moves[1:], strict=False):
        assert to == after, moves  # each move starts where the last one ended

    [call] = of_type(events, "tool.completed")
    assert call["name"] == "write_file"
    answer = events[-1]["result"]["text"]
    assert "Step 1 done: step one" in answer and "Step 2 done: step two" in answer

    status = stack.status(run["runId"])
    assert status["status"] == "completed" and status["result"] == events[-1]["result"]
    assert status["error"] is None and status["attempts"] == 1
    assert status["usage"]["inputTokens"] > 0 and status["usage"]["outputTokens"] > 0
    usage = of_type(events, "usage")
    assert sum(u["inputTokens"] for u in usage) == status["usage"]["inputTokens"]

    # the step's tool really wrote to the session's workspace: the session's next run (its
    # agent plans too) reads it back
    read = stack.post(
        '/plan check /tool read_file {"path": "plan.txt"}', sessionKey=run["sessionKey"]
    )
    followed = stack.stream(read["runId"])
    assert followed[-1]["type"] == "run.completed"
    [content] = of_type(followed, "tool.completed")
    assert content["name"] == "read_file" and "done" in json.dumps(content["result"])
