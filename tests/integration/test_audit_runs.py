"""What the worker side records in the audit trail: tool executions (with their outcome and an
args digest), failed runs (by the loop, the crash sweep and the deadline sweep), as the run's
user with the role `service` and no request id."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text

from app.config import Settings
from app.core.transcript import ToolCall
from app.queue.manager import ExhaustedRun
from app.queue.sweeps import SWEEP_USER, fail_overdue
from app.runtime.loop import execute_run
from app.runtime.tool_records import tool_started
from app.tools.base import Tool, ToolContext
from app.tools.registry import ToolRegistry
from tests.integration.api_support import Api, auth, make_settings, running_api
from tests.integration.run_support import claim

SETTINGS = Settings(lease_seconds=30)


class Note(Tool):
    """Succeeds, echoing its arguments."""

    name = "note"
    description = "Take a note."
    parameters: dict[str, Any] = {"type": "object"}

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        return {"noted": args}


class Boom(Tool):
    """Always fails."""

    name = "boom"
    description = "Fail."
    parameters: dict[str, Any] = {"type": "object"}

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        raise RuntimeError("boom")


def tools() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(Note())
    registry.register(Boom())
    return registry


@pytest.fixture
async def api(db_url: str) -> AsyncIterator[Api]:
    async with running_api(make_settings(db_url)) as started:
        yield started


async def trail(api: Api, **params: Any) -> list[dict[str, Any]]:
    """The tenant's events for `params`, oldest first."""
    r = await api.client.get(
        "/api/agent-runtime/audit", params={"limit": 500, **params}, headers=auth()
    )
    assert r.status_code == 200, r.text
    assert r.json()["nextCursor"] is None
    return list(reversed(r.json()["events"]))


def digest(args: dict[str, Any]) -> str:
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


async def test_tool_executions_are_audited_with_outcome_and_args_digest(api: Api) -> None:
    args = {"z": 1, "a": {"y": "ü", "b": [1, 2]}}
    message = f"/tool note {json.dumps(args)}\n/tool boom {{}}"
    run = await api.post_run(message)
    await execute_run(await claim(api, run["runId"]), settings=SETTINGS, tools=tools())

    found = await trail(api, action="tool.executed")

    assert [(e["after"]["toolName"], e["after"]["outcome"]) for e in found] == [
        ("note", "completed"),
        ("boom", "failed"),
    ]
    note, boom = (e["after"] for e in found)
    assert note["argsSha256"] == digest(args) and boom["argsSha256"] == digest({})
    assert {note["runId"], boom["runId"]} == {run["runId"]}
    assert note["toolCallId"] != boom["toolCallId"]
    assert all(0 <= e["after"]["durationMs"] < 60_000 for e in found)
    assert "ü" not in json.dumps(found)  # the arguments themselves are not copied
    assert {(e["actorId"], e["actorRole"], e["requestId"]) for e in found} == {
        ("alice", "service", None)
    }
    r = await api.client.get(f"/api/agent-runtime/runs/{run['runId']}/tools", headers=auth())
    executions = {x["toolCallId"]: x["id"] for x in r.json()["executions"]}
    assert {e["targetId"] for e in found} == {
        executions[note["toolCallId"]],
        executions[boom["toolCallId"]],
    }
    assert {e["targetType"] for e in found} == {"tool_execution"}


async def test_a_refused_call_is_audited_as_failed_and_refused(api: Api) -> None:
    run = await api.post_run("/tool nope {}")  # not a tool of the registry: refused
    await execute_run(await claim(api, run["runId"]), settings=SETTINGS, tools=tools())

    [event] = await trail(api, action="tool.executed")

    assert event["after"]["toolName"] == "nope" and event["after"]["outcome"] == "failed"
    assert event["after"]["refused"] is True and event["after"]["durationMs"] is None


async def test_a_failed_run_is_audited_as_its_user(api: Api) -> None:
    run = await api.post_run("/fail")
    await execute_run(await claim(api, run["runId"]), settings=SETTINGS, tools=tools())

    [failed] = await trail(api, action="run.failed")

    assert failed["targetId"] == run["runId"]
    assert (failed["actorId"], failed["actorRole"], failed["requestId"]) == (
        "alice",
        "service",
        None,
    )
    assert failed["after"]["status"] == "failed"
    assert failed["after"]["error"]["code"] == "model_error"
    assert [e["action"] for e in await trail(api, action="run.")] == ["run.created", "run.failed"]


async def test_the_crash_sweep_audits_the_failed_run_and_its_interrupted_call(api: Api) -> None:
    run = await api.post_run("/tool note {}")
    leased = await claim(api, run["runId"])
    await tool_started(leased, ToolCall(id="call_1", name="note", args={"k": "v"}))
    async with api.runtime.db.owner() as s:
        await s.execute(
            text(
                "UPDATE agent_run_queue SET lease_expires_at = now() - interval '1 s'"
                " WHERE id = :id"
            ),
            {"id": leased.run.id},
        )
    exhausted = ExhaustedRun(
        id=leased.run.id, tenant_id="acme", user_id="alice", attempt=leased.run.attempt, stops=5
    )
    assert await api.runtime.queue.fail_crashed(exhausted)
    assert not await api.runtime.queue.fail_crashed(exhausted)  # once: the second does nothing

    found = await trail(api)

    assert [e["action"] for e in found] == ["run.created", "tool.executed", "run.failed"]
    tool, failed = found[1], found[2]
    assert tool["after"]["outcome"] == "interrupted" and tool["after"]["toolCallId"] == "call_1"
    assert tool["after"]["argsSha256"] == digest({"k": "v"})
    assert failed["after"]["error"]["code"] == "worker_crashed"
    assert {(e["actorId"], e["actorRole"]) for e in found[1:]} == {("alice", "service")}


async def test_the_deadline_sweep_audits_the_runs_it_fails(api: Api) -> None:
    run = await api.post_run("late")
    async with api.runtime.db.owner() as s:
        await s.execute(
            text("UPDATE agent_run_queue SET deadline_at = now() - interval '1 s' WHERE id = :id"),
            {"id": run["runId"]},
        )
    assert [str(x) for x in await fail_overdue(api.runtime.db)] == [run["runId"]]

    [failed] = await trail(api, action="run.failed")

    assert (failed["actorId"], failed["actorRole"]) == (SWEEP_USER, "service")
    assert failed["after"]["error"]["code"] == "run_timeout"
