"""The policies and tools routes: store and read policy layers, explain what an agent may use,
list a run's tool calls; validation and tenant isolation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import pytest

from app.auth.principal import Principal
from app.core import events as ev
from app.db.engine import Database
from app.queue.lease import LeasedRun
from app.runtime.loop import execute_run
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api
from tests.integration.policy_support import (
    Recorder,
    catalog_with,
    default_agent_id,
    run_events,
    tool_line,
)

POLICIES = "/api/agent-runtime/policies"
TOOLS = "/api/agent-runtime/tools"


@pytest.fixture
async def api(db_url: str, database: Database) -> AsyncIterator[Api]:
    async with running_api(make_settings(db_url), database) as api:
        yield api


def by_name(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in tools}


async def test_tenant_policy_defaults_put_get_delete(api: Api) -> None:
    r = await api.client.get(POLICIES, headers=auth())
    assert r.status_code == 200, r.text
    assert r.json() == {
        "scope": "tenant",
        "agentId": None,
        "configured": False,
        "profile": "coding",
        "allow": [],
        "deny": [],
        "requireApproval": {
            "risk": [],
            "tools": [],
            "args": [],
            "approverRole": None,
            "allowSelfApproval": True,
        },
        "maxCallsPerTurn": None,
        "maxCallsPerRun": None,
        "sessionScope": "user",
        "updatedAt": None,
    }
    body = {
        "profile": "messaging",
        "allow": ["read_file", " read_file "],
        "deny": ["group:web"],
        "requireApproval": {
            "risk": ["high"],
            "args": [{"tool": "run_shell", "arg": "command", "allowPrefixes": ["ls"]}],
        },
        "maxCallsPerTurn": 4,
    }
    r = await api.client.put(POLICIES, json=body, headers=auth())
    assert r.status_code == 200, r.text
    stored = r.json()
    assert stored["configured"] and stored["profile"] == "messaging"
    assert stored["allow"] == ["read_file"] and stored["deny"] == ["group:web"]
    assert stored["requireApproval"]["args"][0]["allowPrefixes"] == ["ls"]
    assert stored["maxCallsPerTurn"] == 4 and stored["maxCallsPerRun"] is None
    assert (await api.client.get(POLICIES, headers=auth())).json() == stored

    # another tenant has its own (default) policy
    theirs = (await api.client.get(POLICIES, headers=auth("mallory"))).json()
    assert theirs["configured"] is False and theirs["profile"] == "coding"

    # PUT replaces the whole layer
    r = await api.client.put(POLICIES, json={}, headers=auth())
    assert r.json()["profile"] == "coding" and r.json()["deny"] == []
    r = await api.client.delete(POLICIES, headers=auth())
    assert r.status_code == 200 and r.json()["configured"] is False
    assert (await api.client.get(POLICIES, headers=auth())).json()["configured"] is False


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"profile": "godmode"}, "profile"),
        ({"allow": ["rm -rf"]}, "allow"),
        ({"deny": ["group:nope"]}, "deny"),
        ({"maxCallsPerTurn": 0}, "maxCallsPerTurn"),
        ({"sessionScope": "everyone"}, "sessionScope"),
        ({"requireApproval": {"risk": ["extreme"]}}, "requireApproval.risk.0"),
        (
            {"requireApproval": {"args": [{"tool": "x", "arg": "y", "allowRegex": ["("]}]}},
            "requireApproval.args.0.allowRegex",
        ),
        ({"surprise": 1}, None),
    ],
)
async def test_invalid_policies_are_refused(
    api: Api, body: dict[str, Any], field: str | None
) -> None:
    r = await api.client.put(POLICIES, json=body, headers=auth())
    if field is None:  # unknown fields are ignored, like every other body
        assert r.status_code == 200
        return
    assert r.status_code == 422, r.text
    assert error_of(r)["field"] == field


async def test_agent_policy_and_isolation(api: Api, database: Database, alice: Principal) -> None:
    agent_id = await default_agent_id(database, alice)
    path = f"/api/agent-runtime/agents/{agent_id}/policy"
    r = await api.client.get(path, headers=auth())
    assert r.status_code == 200
    assert r.json()["configured"] is False and r.json()["profile"] is None  # inherits
    r = await api.client.put(path, json={"deny": ["run_*"]}, headers=auth())
    assert r.status_code == 200, r.text
    assert r.json()["scope"] == "agent" and r.json()["profile"] is None
    assert r.json()["deny"] == ["run_*"]

    for method in ("GET", "PUT", "DELETE"):
        r = await api.client.request(method, path, json={}, headers=auth("mallory"))
        assert r.status_code == 404, (method, r.text)
        assert error_of(r)["field"] == "agentId"
    assert (await api.client.get(path, headers=auth())).json()["deny"] == ["run_*"]

    r = await api.client.delete(path, headers=auth())
    assert r.json()["configured"] is False
    bogus = "/api/agent-runtime/agents/00000000-0000-0000-0000-000000000000/policy"
    assert (await api.client.get(bogus, headers=auth())).status_code == 404


async def test_tools_explains_what_is_allowed_and_why(
    api: Api, database: Database, alice: Principal
) -> None:
    api.app.state.tool_catalog = catalog_with(
        Recorder("admin_tool", group="runtime", risk="high", owner_only=True)
    )
    agent_id = await default_agent_id(database, alice)  # owned by alice
    await api.client.put(
        POLICIES,
        json={
            "profile": "coding",
            "allow": ["sessions_*"],
            "deny": ["delete_file"],
            "requireApproval": {
                "tools": ["write_file"],
                "args": [
                    {"tool": "run_shell", "arg": "command", "allowPrefixes": ["ls", "git status"]}
                ],
            },
            "maxCallsPerRun": 20,
        },
        headers=auth(),
    )
    await api.client.put(
        f"/api/agent-runtime/agents/{agent_id}/policy",
        json={"deny": ["web_*"], "maxCallsPerRun": 5},
        headers=auth(),
    )
    r = await api.client.get(TOOLS, params={"agentId": str(agent_id)}, headers=auth())
    assert r.status_code == 200, r.text
    page = r.json()
    assert page["agentId"] == str(agent_id)
    assert (page["profile"], page["profileSource"], page["owner"]) == ("coding", "tenant", True)
    assert page["maxCallsPerRun"] == 5 and page["maxCallsPerTurn"] is None
    allowed, denied = by_name(page["allowed"]), by_name(page["denied"])
    assert allowed["read_file"]["reason"] == "allowed by the tenant profile 'coding' (group:fs)"
    assert allowed["read_file"]["rule"] == {
        "kind": "profile",
        "scope": "tenant",
        "pattern": "group:fs",
        "profile": "coding",
    }
    assert allowed["sessions_list"]["reason"] == "allowed by the tenant allow pattern 'sessions_*'"
    assert allowed["admin_tool"]["ownerOnly"] and allowed["admin_tool"]["risk"] == "high"
    assert allowed["write_file"]["approval"] == "tool matches 'write_file' (tenant policy)"
    assert allowed["read_file"]["approval"] is None
    assert allowed["run_shell"]["approval"] == (
        "needs approval unless `command` matches the allowlist: prefixes 'ls', 'git status' "
        "(tenant policy)"
    )
    assert allowed["write_file"]["parameters"]["required"] == ["path", "content"]
    assert denied["delete_file"]["reason"] == "denied by the tenant deny pattern 'delete_file'"
    assert denied["web_fetch"]["reason"] == "denied by the agent deny pattern 'web_*'"
    assert denied["web_fetch"]["rule"]["kind"] == "deny"
    assert not set(allowed) & set(denied)

    # Another user of the tenant is not the agent's owner; without agentId: the default agent.
    r = await api.client.get(TOOLS, headers=auth("bob", tenant="acme"))
    page = r.json()
    assert page["agentId"] == str(agent_id) and page["owner"] is False
    assert by_name(page["denied"])["admin_tool"]["reason"] == (
        "owner-only tool: only the agent's owner may use it"
    )

    # Another tenant's agent does not exist.
    r = await api.client.get(TOOLS, params={"agentId": str(agent_id)}, headers=auth("mallory"))
    assert r.status_code == 404 and error_of(r)["field"] == "agentId"
    # A tenant without agents gets its tenant policy (the default profile here).
    r = await api.client.get(TOOLS, headers=auth("mallory"))
    assert r.json()["agentId"] is None and r.json()["profileSource"] == "default"


async def test_run_tools_lists_the_runs_tool_calls(
    api: Api, database: Database, alice: Principal
) -> None:
    await api.client.put(POLICIES, json={"deny": ["delete_file"]}, headers=auth())
    message = "\n".join(
        [
            tool_line("write_file", path="a.txt", content="hi"),
            tool_line("read_file", path="missing.txt"),
            tool_line("delete_file", path="a.txt"),
        ]
    )
    run = await api.post_run(message, sessionKey="s1")
    claimed = await api.runtime.queue.claim_next("w-test", 30)
    assert claimed is not None and str(claimed.id) == run["runId"]
    await execute_run(LeasedRun(database, claimed, "w-test"), settings=api.runtime.settings)

    r = await api.client.get(f"/api/agent-runtime/runs/{run['runId']}/tools", headers=auth())
    assert r.status_code == 200, r.text
    page = r.json()
    assert page["runId"] == run["runId"]
    rows = {e["name"]: e for e in page["executions"]}
    assert list(rows) == ["write_file", "read_file", "delete_file"]
    write = rows["write_file"]
    assert write["status"] == "completed" and write["args"] == {"path": "a.txt", "content": "hi"}
    assert write["result"]["size"] == 2 and write["error"] is None
    assert write["attempt"] == 1 and write["workerId"] == "w-test"
    assert write["durationMs"] is not None and write["durationMs"] >= 0
    assert write["approvalId"] is None and write["approvalStatus"] is None
    assert rows["read_file"]["status"] == "failed"
    assert rows["read_file"]["error"] == {"message": "no such file: missing.txt"}
    assert rows["delete_file"]["status"] == "failed"
    assert "denied by the tenant deny pattern" in rows["delete_file"]["error"]["message"]

    # every tool.* event carries the id of its call's row: completed, failed and refused calls
    evs = await run_events(database, alice, UUID(run["runId"]))
    by_call = {e["toolCallId"]: e["id"] for e in page["executions"]}
    assert len(set(by_call.values())) == 3
    tool_events = [(t, d) for t, d in evs if t.startswith("tool.")]
    assert [t for t, _ in tool_events] == [
        ev.TOOL_STARTED,
        ev.TOOL_COMPLETED,
        ev.TOOL_STARTED,
        ev.TOOL_FAILED,
        ev.TOOL_FAILED,  # delete_file: refused by the policy, never started
    ]
    for _, data in tool_events:
        assert data["executionId"] == by_call[data["toolCallId"]]

    other = await api.client.get(
        f"/api/agent-runtime/runs/{run['runId']}/tools", headers=auth("mallory")
    )
    assert other.status_code == 404 and error_of(other)["field"] == "runId"


async def test_session_scope_is_opened_by_the_tenant_and_only_narrowed_by_an_agent(
    api: Api, database: Database, alice: Principal
) -> None:
    r = await api.client.put(POLICIES, json={"sessionScope": "tenant"}, headers=auth())
    assert r.status_code == 200, r.text
    assert r.json()["sessionScope"] == "tenant"
    assert (await api.client.get(POLICIES, headers=auth())).json()["sessionScope"] == "tenant"
    r = await api.client.put(POLICIES, json={}, headers=auth())
    assert r.json()["sessionScope"] == "user"  # replaced: back to the default

    agent_id = await default_agent_id(database, alice)
    path = f"/api/agent-runtime/agents/{agent_id}/policy"
    assert (await api.client.get(path, headers=auth())).json()["sessionScope"] is None
    r = await api.client.put(path, json={"sessionScope": "tenant"}, headers=auth())
    assert r.status_code == 422, r.text
    assert error_of(r)["field"] == "sessionScope" and "narrow" in error_of(r)["message"]
    r = await api.client.put(path, json={"sessionScope": "user"}, headers=auth())
    assert r.status_code == 200, r.text
    assert r.json()["sessionScope"] == "user"
    r = await api.client.put(path, json={}, headers=auth())
    assert r.json()["sessionScope"] is None  # inherits the tenant's again
