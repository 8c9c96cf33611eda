"""Per-run limits set on agents over the API: max turns, wall-clock timeout, token budget.

Each limit ends the run `failed` with its own code; the timeout interrupts a model call or a tool
in flight, counts from the run's first start (resumed attempts get no fresh budget) and is told
apart from the worker's cancellation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text

from app.core import events as ev
from app.db.engine import Database
from app.llm.base import Model
from app.runtime.loop import execute_run
from app.runtime.usage import add_usage
from app.tools.base import Tool, ToolContext
from app.tools.registry import ToolRegistry
from tests.integration.api_support import Api, make_settings, running_api
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


class Slow(Tool):
    """A tool that takes far longer than any test's timeout."""

    name = "slow"
    description = "Wait a long time."
    parameters: dict[str, Any] = {"type": "object", "additionalProperties": False}

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        self.started.set()
        await asyncio.sleep(30)
        return "woke up"


async def run_with(
    api: Api,
    message: str,
    *,
    model: Model | None = None,
    tools: ToolRegistry | None = None,
    **agent: Any,
) -> str:
    """Run `message` with a new agent configured by `agent` to its end; the run id."""
    agent_id = await create_agent(api, f"agent-{len(agent)}-{time.monotonic_ns()}", **agent)
    run = await api.post_run(message, agentId=agent_id)
    leased = await claim(api, run["runId"])
    models = registry_of(model) if model is not None else None
    await execute_run(leased, settings=api.runtime.settings, models=models, tools=tools)
    run_id: str = run["runId"]
    return run_id


async def failure(api: Api, run_id: str) -> dict[str, Any]:
    run = await status(api, run_id)
    assert run["status"] == "failed", run
    error: dict[str, Any] = run["error"]
    return error


# ------------------------------------------------------------------ max turns


async def test_max_turns_exceeded(api: Api) -> None:
    run_id = await run_with(api, "/tool list_files", maxTurns=1)
    error = await failure(api, run_id)
    assert error == {
        "code": "max_turns_exceeded",
        "message": "no final answer within the agent's limit of 1 model turns",
    }
    found = await events(api, run_id)
    assert states_of(found)[-1] == ("observing", "failed")
    assert [e["type"] for e in found][-2:] == [ev.STATE_CHANGED, ev.RUN_FAILED]


# ------------------------------------------------------------------ timeout


async def test_timeout_interrupts_a_model_call(api: Api) -> None:
    begin = time.monotonic()
    run_id = await run_with(api, "/sleep 10000", timeoutSeconds=1)
    assert time.monotonic() - begin < 4
    error = await failure(api, run_id)
    assert error == {
        "code": "run_timeout",
        "message": "the run did not finish within the agent's limit of 1 seconds",
    }
    found = await events(api, run_id)
    assert states_of(found) == [("queued", "thinking"), ("thinking", "failed")]
    assert of_type(found, ev.ASSISTANT_MESSAGE) == []


async def test_timeout_interrupts_a_tool(api: Api) -> None:
    slow = Slow()
    begin = time.monotonic()
    run_id = await run_with(api, "/tool slow", tools=ToolRegistry([slow]), timeoutSeconds=1)
    assert slow.started.is_set() and time.monotonic() - begin < 4
    assert (await failure(api, run_id))["code"] == "run_timeout"
    found = await events(api, run_id)
    assert [e["name"] for e in of_type(found, ev.TOOL_STARTED)] == ["slow"]
    assert of_type(found, ev.TOOL_COMPLETED) == [] and of_type(found, ev.TOOL_FAILED) == []
    assert states_of(found)[-1] == ("tool_calling", "failed")


async def test_default_timeout_comes_from_the_settings(database: Database, db_url: str) -> None:
    settings = make_settings(db_url, run_timeout_seconds=0.5)
    async with running_api(settings, database) as api:
        run_id = await run_with(api, "/sleep 10000")
        error = await failure(api, run_id)
    assert error["code"] == "run_timeout" and "0.5 seconds" in error["message"]


async def test_timeout_counts_from_the_first_start(api: Api) -> None:
    agent_id = await create_agent(api, "patient", timeoutSeconds=60)
    run = await api.post_run("/sleep 10000", agentId=agent_id)
    dead = await claim(api, run["runId"])
    async with api.runtime.db.owner() as s:  # the first attempt started long ago, then died
        await s.execute(
            text("UPDATE agent_run_queue SET started_at = now() - interval '61 s' WHERE id = :id"),
            {"id": dead.run.id},
        )
    alive = await crash_and_resume(api, dead)
    model = Recording()
    begin = time.monotonic()
    await execute_run(alive, settings=api.runtime.settings, models=registry_of(model))
    assert time.monotonic() - begin < 2 and model.requests == []  # no fresh budget
    assert (await failure(api, run["runId"]))["code"] == "run_timeout"
    found = await events(api, run["runId"])
    assert states_of(found) == [("queued", "failed")]


async def test_worker_cancellation_is_not_a_timeout(api: Api) -> None:
    agent_id = await create_agent(api, "cancellable", timeoutSeconds=30)
    run = await api.post_run("/sleep 10000", agentId=agent_id)
    leased = await claim(api, run["runId"])
    task = asyncio.create_task(execute_run(leased, settings=api.runtime.settings))
    deadline = time.monotonic() + 5
    while (await status(api, run["runId"]))["state"] != "thinking":
        assert time.monotonic() < deadline and not task.done()
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    run_now = await status(api, run["runId"])
    assert run_now["status"] == "running" and run_now["error"] is None  # the worker finishes it
    assert of_type(await events(api, run["runId"]), ev.RUN_FAILED) == []


# ------------------------------------------------------------------ token budget


async def test_token_budget_exceeded(api: Api) -> None:
    run_id = await run_with(api, "hello", tokenBudget=10)
    error = await failure(api, run_id)
    assert error["code"] == "token_budget_exceeded"
    found = await events(api, run_id)
    [usage] = of_type(found, ev.USAGE)
    used = usage["inputTokens"] + usage["outputTokens"]
    assert used > 10
    assert error["message"] == f"the run used {used} tokens, over the agent's budget of 10"
    assert states_of(found)[-1] == ("responding", "failed")


async def test_token_budget_spans_turns_and_is_not_hit_when_large(api: Api) -> None:
    first = await run_with(api, "/tool list_files", tokenBudget=1_000_000)
    assert (await status(api, first))["status"] == "completed"
    used = sum(
        u["inputTokens"] + u["outputTokens"] for u in of_type(await events(api, first), ev.USAGE)
    )
    # a budget the first turn fits in but the two turns together do not
    first_turn = of_type(await events(api, first), ev.USAGE)[0]
    budget = first_turn["inputTokens"] + first_turn["outputTokens"] + 1
    assert budget < used
    second = await run_with(api, "/tool list_files", tokenBudget=budget)
    error = await failure(api, second)
    assert error["code"] == "token_budget_exceeded"
    assert len(of_type(await events(api, second), ev.USAGE)) == 2


async def test_a_resumed_run_over_its_budget_fails_without_calling_the_model(api: Api) -> None:
    agent_id = await create_agent(api, "frugal", tokenBudget=500)
    run = await api.post_run("hello", agentId=agent_id)
    dead = await claim(api, run["runId"])
    await add_usage(dead, 400, 200)  # the dead attempt's calls
    alive = await crash_and_resume(api, dead)
    model = Recording()
    await execute_run(alive, settings=api.runtime.settings, models=registry_of(model))
    assert model.requests == []
    error = await failure(api, run["runId"])
    assert error == {
        "code": "token_budget_exceeded",
        "message": "the run used 600 tokens, over the agent's budget of 500",
    }
