"""Tool policy through the agent loop: what the model is offered, and refusals at execution.

Runs are claimed through `RunQueue` and executed by `execute_run` with the registry the worker
builds (`tools_for_run`), or with the unfiltered default registry (the execution-time check must
refuse on its own).
"""

from __future__ import annotations

from typing import Any

import pytest

from app.auth.principal import Principal
from app.config import Settings
from app.core import events as ev
from app.db.engine import Database
from app.queue.lease import LeasedRun
from app.queue.manager import RunQueue
from app.runtime.loop import execute_run
from app.tools.registry import ToolRegistry, tools_for_run
from app.tools.workspace import Workspace
from tests.integration.policy_support import (
    Recorder,
    Recording,
    Scripted,
    call,
    catalog_with,
    default_agent_id,
    executions,
    models_with,
    run_events,
    set_policy,
    tool_line,
)

SETTINGS = Settings(_env_file=None, lease_seconds=30)  # type: ignore[call-arg]
BOB = Principal(user_id="bob", tenant_id="acme")


@pytest.fixture
def queue(database: Database) -> RunQueue:
    return RunQueue(database)


async def start(queue: RunQueue, who: Principal, message: str, session_key: str = "s") -> LeasedRun:
    await queue.enqueue_run(who, message=message, session_key=session_key)
    claimed = await queue.claim_next("w1", 30)
    assert claimed is not None
    return LeasedRun(queue.db, claimed, "w1")


async def run_with(
    leased: LeasedRun, model: Recording | Scripted, catalog: ToolRegistry | None = None
) -> None:
    """Execute the run as the worker does: the catalog filtered by the run's policy."""
    tools = await tools_for_run(leased.db, leased.run, catalog or catalog_with())
    await execute_run(leased, settings=SETTINGS, models=models_with(model), tools=tools)


def failures(evs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [d["error"] for t, d in evs if t == ev.TOOL_FAILED]


async def test_denied_tool_is_not_offered_and_refused_if_called(
    queue: RunQueue, alice: Principal
) -> None:
    await set_policy(queue.db, alice, deny=("write_file",))
    leased = await start(queue, alice, tool_line("write_file", path="a.txt", content="x"))
    model = Recording()
    await run_with(leased, model)

    assert "write_file" not in model.offered[0]
    assert {"read_file", "edit_file", "web_fetch"} <= set(model.offered[0])
    evs = await run_events(queue.db, alice, leased.run.id)
    assert failures(evs) == [
        "tool 'write_file' is not allowed for this agent: "
        "denied by the tenant deny pattern 'write_file'"
    ]
    assert ev.TOOL_STARTED not in [t for t, _ in evs]  # never started
    [execution] = await executions(queue.db, alice, leased.run.id)
    assert execution.status == "failed" and "not allowed" in (execution.error or {})["message"]
    files, _ = await Workspace(
        queue.db, alice, leased.run.session_id, max_file_bytes=10, max_total_bytes=10
    ).list_files()
    assert files == []
    result = dict(evs)[ev.RUN_COMPLETED]["result"]["text"]
    assert result.startswith("write_file failed: tool 'write_file' is not allowed")


async def test_unknown_tool_names_only_the_allowed_ones(queue: RunQueue, alice: Principal) -> None:
    await set_policy(queue.db, alice, profile="minimal")
    leased = await start(queue, alice, tool_line("launch_missiles"))
    model = Recording()
    await run_with(leased, model)
    assert model.offered[0] == [
        "list_files",
        "read_file",
        "sessions_history",
        "sessions_list",
        "sessions_spawn",
        "sessions_wait",
    ]
    assert failures(await run_events(queue.db, alice, leased.run.id)) == [
        "unknown tool 'launch_missiles' "
        "(available: list_files, read_file, sessions_history, sessions_list, sessions_spawn, "
        "sessions_wait)"
    ]


async def test_unfiltered_registry_is_still_checked_at_execution(
    queue: RunQueue, alice: Principal
) -> None:
    await set_policy(queue.db, alice, profile="full", deny=("group:fs",))
    leased = await start(queue, alice, tool_line("write_file", path="a.txt", content="x"))
    await execute_run(leased, settings=SETTINGS)  # the default, unfiltered registry
    assert failures(await run_events(queue.db, alice, leased.run.id)) == [
        "tool 'write_file' is not allowed for this agent: "
        "denied by the tenant deny pattern 'group:fs'"
    ]


async def test_caps_per_turn_and_per_run(queue: RunQueue, alice: Principal) -> None:
    await set_policy(queue.db, alice, max_calls_per_turn=2, max_calls_per_run=3)
    model = Scripted(
        [
            [call("list_files", "a1"), call("list_files", "a2"), call("list_files", "a3")],
            [call("list_files", "b1"), call("list_files", "b2")],
            "all done",
        ]
    )
    leased = await start(queue, alice, "go")
    await run_with(leased, model)

    evs = await run_events(queue.db, alice, leased.run.id)
    assert evs[-1] == (ev.RUN_COMPLETED, {"result": {"text": "all done"}})
    outcome = {
        d["toolCallId"]: (t, d.get("error"))
        for t, d in evs
        if t.startswith("tool.") and t != ev.TOOL_STARTED
    }
    assert outcome["a1"][0] == outcome["a2"][0] == ev.TOOL_COMPLETED
    assert outcome["a3"][0] == ev.TOOL_FAILED
    assert outcome["a3"][1] == (
        "tool call limit reached: at most 2 tool calls per model turn (tenant policy); "
        "this was call 3 of the turn and was not executed"
    )
    assert outcome["b1"][1] == (
        "tool call limit reached: at most 3 tool calls per run (tenant policy); "
        "this was call 4 of the run and was not executed"
    )
    assert outcome["b2"][0] == ev.TOOL_FAILED
    statuses = {e.tool_call_id: e.status for e in await executions(queue.db, alice, leased.run.id)}
    assert statuses == {
        "a1": "completed",
        "a2": "completed",
        "a3": "failed",
        "b1": "failed",
        "b2": "failed",
    }


async def test_owner_only_tool_needs_the_agents_owner(queue: RunQueue, alice: Principal) -> None:
    admin = Recorder("admin_tool", group="runtime", owner_only=True)
    catalog = catalog_with(admin)
    await set_policy(queue.db, alice, profile="full")

    owner_run = await start(queue, alice, tool_line("admin_tool"), session_key="alice-s")
    owner_model = Recording()
    await run_with(owner_run, owner_model, catalog)
    assert "admin_tool" in owner_model.offered[0] and len(admin.calls) == 1

    bob_run = await start(queue, BOB, tool_line("admin_tool"), session_key="bob-s")
    bob_model = Recording()
    await run_with(bob_run, bob_model, catalog)
    assert "admin_tool" not in bob_model.offered[0] and len(admin.calls) == 1
    assert failures(await run_events(queue.db, BOB, bob_run.run.id)) == [
        "tool 'admin_tool' is not allowed for this agent: "
        "owner-only tool: only the agent's owner may use it"
    ]


async def test_agent_policy_refines_the_tenant_policy(queue: RunQueue, alice: Principal) -> None:
    agent_id = await default_agent_id(queue.db, alice)
    await set_policy(queue.db, alice, profile="coding", deny=("web_fetch",))
    await set_policy(
        queue.db,
        alice,
        agent_id=agent_id,
        profile=None,  # inherit coding
        allow=("sessions_*", "web_fetch"),
        deny=("delete_file",),
    )
    leased = await start(queue, alice, tool_line("web_fetch", url="http://example.com"))
    model = Recording()
    await run_with(leased, model)
    offered = set(model.offered[0])
    assert {"write_file", "edit_file", "sessions_list", "sessions_history"} <= offered
    assert "delete_file" not in offered  # the agent's deny
    assert "web_fetch" not in offered  # the tenant's deny beats the agent's allow
    assert failures(await run_events(queue.db, alice, leased.run.id)) == [
        "tool 'web_fetch' is not allowed for this agent: "
        "denied by the tenant deny pattern 'web_fetch'"
    ]
