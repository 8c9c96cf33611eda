"""Roles inside a tenant through the HTTP API: admin-only management (with its audit events),
session visibility (private, shared read-only), approvers (`approverRole`, `allowSelfApproval`)
and the members list with `member.role_changed`.

In tenant acme alice is the owner; bob, carol and dave come with the role their token says.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import select

from app.auth.principal import Principal
from app.db.engine import Database
from app.db.models import AuditEvent, TenantMember
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api
from tests.integration.policy_support import (
    running_worker,
    set_policy,
    tool_line,
    wait_status,
    worker_settings,
)

BASE = "/api/agent-runtime"
APPROVALS = f"{BASE}/approvals"
WRITE = tool_line("write_file", path="out.txt", content="approved content")


def member(user: str) -> dict[str, str]:
    return auth(user, tenant="acme", role="member")


def admin(user: str) -> dict[str, str]:
    return auth(user, tenant="acme", role="admin")


@pytest.fixture
async def api(db_url: str, database: Database) -> AsyncIterator[Api]:
    async with running_api(make_settings(db_url), database) as api:
        yield api


async def audit_events(database: Database, action: str) -> list[AuditEvent]:
    async with database.owner() as s:
        rows = await s.scalars(
            select(AuditEvent).where(AuditEvent.action == action).order_by(AuditEvent.id)
        )
        return list(rows)


async def post(api: Api, headers: dict[str, str], message: str = "hi", **body: Any) -> Any:
    return await api.client.post(BASE, json={"message": message, **body}, headers=headers)


# ------------------------------------------------------------------ admin-only management


async def test_members_read_agents_and_policies_but_only_admins_change_them(
    api: Api, database: Database
) -> None:
    bob = member("bob")
    # a member's first run in a fresh tenant still gets the default agent (made by the runtime)
    r = await post(api, bob)
    assert r.status_code == 202, r.text
    agents = await api.client.get(f"{BASE}/agents", headers=bob)
    assert agents.status_code == 200 and [a["name"] for a in agents.json()["agents"]] == ["default"]
    default_id = agents.json()["agents"][0]["id"]

    writes = [
        ("POST", f"{BASE}/agents", {"name": "helper"}),
        ("PATCH", f"{BASE}/agents/{default_id}", {"maxTurns": 3}),
        ("DELETE", f"{BASE}/agents/{default_id}", None),
        ("PUT", f"{BASE}/policies", {"profile": "full"}),
        ("DELETE", f"{BASE}/policies", None),
        ("PUT", f"{BASE}/agents/{default_id}/policy", {"deny": ["run_shell"]}),
        ("DELETE", f"{BASE}/agents/{default_id}/policy", None),
    ]
    for method, path, body in writes:
        r = await api.client.request(method, path, json=body, headers=bob)
        assert r.status_code == 403, (method, path, r.text)
        error = error_of(r)
        assert error["code"] == "forbidden_role", error
        assert "'member'" in error["message"] and "admin" in error["message"]
    for path in (f"{BASE}/policies", f"{BASE}/agents/{default_id}/policy", f"{BASE}/tools"):
        assert (await api.client.get(path, headers=bob)).status_code == 200, path
    assert await audit_events(database, "agent.created") == []

    # an admin (not the owner) manages them; each change is audited with before/after
    carol = admin("carol")
    r = await api.client.post(f"{BASE}/agents", json={"name": "helper"}, headers=carol)
    assert r.status_code == 201, r.text
    helper = r.json()["id"]
    r = await api.client.patch(f"{BASE}/agents/{helper}", json={"maxTurns": 3}, headers=carol)
    assert r.status_code == 200 and r.json()["maxTurns"] == 3
    r = await api.client.put(f"{BASE}/policies", json={"deny": ["group:web"]}, headers=carol)
    assert r.status_code == 200, r.text
    r = await api.client.put(f"{BASE}/policies", json={"deny": []}, headers=carol)
    r = await api.client.delete(f"{BASE}/policies", headers=carol)
    assert r.status_code == 200

    [created] = await audit_events(database, "agent.created")
    assert (created.actor_id, created.actor_role, created.target_id) == ("carol", "admin", helper)
    assert created.before is None and created.after is not None
    assert created.after["name"] == "helper"
    [updated] = await audit_events(database, "agent.updated")
    assert updated.before is not None and updated.after is not None
    assert (updated.before["maxTurns"], updated.after["maxTurns"]) != (3, 3)
    assert updated.after["maxTurns"] == 3
    first, second = await audit_events(database, "policy.updated")
    assert first.before is None and first.after is not None
    assert first.after["deny"] == ["group:web"] and first.target_id == "tenant"
    assert second.before is not None and second.before["deny"] == ["group:web"]
    assert second.after is not None and second.after["deny"] == []
    [deleted] = await audit_events(database, "policy.deleted")
    assert deleted.before is not None and deleted.after is None
    assert all(e.request_id for e in (created, updated, first, second, deleted))

    # deleting: the default agent and one with sessions stay (409); an unused one goes
    r = await api.client.delete(f"{BASE}/agents/{default_id}", headers=carol)
    assert r.status_code == 409 and "default agent" in error_of(r)["message"]
    assert (await post(api, bob, agentId=helper)).status_code == 202
    r = await api.client.delete(f"{BASE}/agents/{helper}", headers=carol)
    assert r.status_code == 409 and "used by sessions" in error_of(r)["message"]
    r = await api.client.post(f"{BASE}/agents", json={"name": "temp"}, headers=carol)
    temp = r.json()["id"]
    r = await api.client.delete(f"{BASE}/agents/{temp}", headers=carol)
    assert r.status_code == 204, r.text
    assert (await api.client.get(f"{BASE}/agents/{temp}", headers=carol)).status_code == 404
    assert (await api.client.delete(f"{BASE}/agents/{temp}", headers=carol)).status_code == 404
    [gone] = await audit_events(database, "agent.deleted")
    assert gone.target_id == temp and gone.after is None
    assert gone.before is not None and gone.before["name"] == "temp"


# ------------------------------------------------------------------ session visibility


async def test_private_sessions_are_their_users_and_shared_ones_are_read_only(
    api: Api, database: Database
) -> None:
    bob, carol = member("bob"), member("carol")
    r = await post(api, bob, "bob's secret", sessionKey="bob-chat")
    assert r.status_code == 202, r.text
    run_id = r.json()["runId"]
    r = await api.client.put(
        f"{BASE}/sessions/bob-chat/files/notes.txt", content=b"bob's notes", headers=bob
    )
    assert r.status_code == 201, r.text
    r = await post(api, carol, "carol's own", sessionKey="carol-chat")
    assert r.status_code == 202

    run_paths = [
        f"{BASE}/status?runId={run_id}",
        f"{BASE}/runs/{run_id}/events",
        f"{BASE}/runs/{run_id}/tools",
        f"{BASE}/stream?runId={run_id}",
    ]
    session_paths = [
        f"{BASE}/sessions/bob-chat",
        f"{BASE}/sessions/bob-chat/messages",
        f"{BASE}/sessions/bob-chat/files",
        f"{BASE}/sessions/bob-chat/files/notes.txt",
    ]

    async def keys(headers: dict[str, str]) -> set[str]:
        r = await api.client.get(f"{BASE}/sessions", headers=headers)
        assert r.status_code == 200, r.text
        return {s["sessionKey"] for s in r.json()["sessions"]}

    # private: carol (a member) sees nothing of it; the owner sees everything
    assert await keys(carol) == {"carol-chat"}
    assert await keys(bob) == {"bob-chat"}
    assert await keys(auth("alice")) == {"bob-chat", "carol-chat"}
    for path in [*run_paths, *session_paths]:
        r = await api.client.get(path, headers=carol)
        assert r.status_code == 404, (path, r.text)
        assert error_of(r)["code"] == "not_found"
    for path in [*run_paths[:3], *session_paths]:
        assert (await api.client.get(path, headers=auth("alice"))).status_code == 200, path

    # posting with bob's private key: a clean 409, never the unique index's 500
    r = await post(api, carol, "let me in", sessionKey="bob-chat")
    assert r.status_code == 409, r.text
    assert "another user's private session" in error_of(r)["message"]
    chat = {
        "id": "bob-chat",
        "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
        "trigger": "submit-message",
        "messageId": None,
    }
    r = await api.client.post(f"{BASE}/chat", json=chat, headers=carol)  # the AI SDK's route
    assert r.status_code == 409, r.text
    assert error_of(r)["code"] == "conflict"
    r = await api.client.get(f"{BASE}/chat/bob-chat/stream", headers=carol)
    assert r.status_code == 204, r.text  # bob's queued run does not exist for her
    r = await api.client.patch(
        f"{BASE}/sessions/bob-chat", json={"visibility": "tenant"}, headers=carol
    )
    assert r.status_code == 404

    # shared: readable by every member, still writable by bob only
    r = await api.client.patch(
        f"{BASE}/sessions/bob-chat", json={"visibility": "tenant"}, headers=bob
    )
    assert r.status_code == 200, r.text
    assert r.json()["visibility"] == "tenant" and r.json()["userId"] == "bob"
    assert await keys(carol) == {"bob-chat", "carol-chat"}
    for path in [*run_paths[:3], *session_paths]:
        assert (await api.client.get(path, headers=carol)).status_code == 200, path
    refusals = [
        await post(api, carol, "my turn", sessionKey="bob-chat"),
        await api.client.put(
            f"{BASE}/sessions/bob-chat/files/notes.txt", content=b"carol was here", headers=carol
        ),
        await api.client.delete(f"{BASE}/sessions/bob-chat/files/notes.txt", headers=carol),
        await api.client.post(f"{BASE}/cancel?runId={run_id}", headers=carol),
        await api.client.patch(
            f"{BASE}/sessions/bob-chat", json={"visibility": "private"}, headers=carol
        ),
    ]
    for r in refusals:
        assert r.status_code == 403, (r.request.method, r.request.url, r.text)
        assert error_of(r)["code"] == "read_only_session"
    r = await api.client.get(f"{BASE}/sessions/bob-chat/files/notes.txt", headers=carol)
    assert r.content == b"bob's notes"

    # bob posts on; an admin may take it private again
    assert (await post(api, bob, "still mine", sessionKey="bob-chat")).status_code == 202
    r = await api.client.patch(
        f"{BASE}/sessions/bob-chat", json={"visibility": "private"}, headers=admin("dave")
    )
    assert r.status_code == 200 and r.json()["visibility"] == "private"
    assert await keys(carol) == {"carol-chat"}
    r = await api.client.patch(f"{BASE}/sessions/bob-chat", json={"visibility": "x"}, headers=bob)
    assert r.status_code == 422


# ------------------------------------------------------------------ approvers


async def test_approver_role_and_self_approval_are_enforced_as_stored(
    api: Api, database: Database, db_url: str, alice: Principal
) -> None:
    await set_policy(
        database,
        alice,
        approval={"tools": ["write_file"], "approverRole": "admin", "allowSelfApproval": False},
    )
    bob, carol, dave = member("bob"), member("carol"), admin("dave")
    async with running_worker(database, worker_settings(db_url), "w1"):
        r = await post(api, bob, WRITE, sessionKey="bob-writes")
        assert r.status_code == 202, r.text
        bob_run = UUID(r.json()["runId"])
        r = await post(api, dave, WRITE, sessionKey="dave-writes")
        dave_run = UUID(r.json()["runId"])
        for run_id in (bob_run, dave_run):
            await wait_status(database, alice, run_id, {"awaiting_approval"})

        # the policy is loosened after the calls were parked: the stored rule still holds
        await set_policy(database, alice, approval={"tools": ["write_file"]})

        listed = (await api.client.get(APPROVALS, headers=bob)).json()["approvals"]
        [mine] = listed  # a member sees the approvals of their own runs only
        assert mine["runId"] == str(bob_run)
        assert mine["approverRole"] == "admin" and mine["allowSelfApproval"] is False
        assert mine["canDecide"] is False
        assert (await api.client.get(APPROVALS, headers=carol)).json()["approvals"] == []
        r = await api.client.get(f"{APPROVALS}/{mine['approvalId']}", headers=carol)
        assert r.status_code == 404

        r = await api.client.post(
            f"{APPROVALS}/{mine['approvalId']}", json={"decision": "approve"}, headers=bob
        )
        assert r.status_code == 403, r.text
        error = error_of(r)
        assert error["code"] == "forbidden_approver"
        assert "approverRole 'admin'" in error["message"]
        assert "tool matches 'write_file' (tenant policy)" in error["message"]

        by_admin = {
            a["runId"]: a
            for a in (await api.client.get(APPROVALS, headers=dave)).json()["approvals"]
        }
        assert set(by_admin) == {str(bob_run), str(dave_run)}
        assert by_admin[str(bob_run)]["canDecide"] is True
        assert by_admin[str(dave_run)]["canDecide"] is False  # his own run: no self-approval
        r = await api.client.post(
            f"{APPROVALS}/{by_admin[str(dave_run)]['approvalId']}",
            json={"decision": "approve"},
            headers=dave,
        )
        assert r.status_code == 403
        assert "allowSelfApproval false" in error_of(r)["message"]

        r = await api.client.post(
            f"{APPROVALS}/{mine['approvalId']}",
            json={"decision": "approve", "reason": "looks fine"},
            headers=dave,
        )
        assert r.status_code == 200, r.text
        assert r.json()["decidedBy"] == "dave" and r.json()["canDecide"] is False
        r = await api.client.post(
            f"{APPROVALS}/{by_admin[str(dave_run)]['approvalId']}",
            json={"decision": "deny"},
            headers=auth("alice"),
        )
        assert r.status_code == 200, r.text
        await wait_status(database, alice, bob_run, {"completed"})

    [approved] = await audit_events(database, "approval.approved")
    assert (approved.actor_id, approved.target_id) == ("dave", mine["approvalId"])
    assert approved.after is not None
    assert approved.after["tool"] == "write_file"
    assert approved.after["rule"] == "tool matches 'write_file' (tenant policy)"
    assert approved.after["approverRole"] == "admin"
    [denied] = await audit_events(database, "approval.denied")
    assert denied.actor_id == "alice" and denied.after is not None
    assert denied.after["runId"] == str(dave_run)


async def test_approver_role_owner_needs_an_owner(
    api: Api, database: Database, db_url: str, alice: Principal
) -> None:
    await set_policy(database, alice, approval={"tools": ["write_file"], "approverRole": "owner"})
    async with running_worker(database, worker_settings(db_url), "w1"):
        r = await post(api, member("bob"), WRITE)
        run_id = UUID(r.json()["runId"])
        await wait_status(database, alice, run_id, {"awaiting_approval"})
        [approval] = (await api.client.get(APPROVALS, headers=auth("alice"))).json()["approvals"]
        assert approval["approverRole"] == "owner" and approval["canDecide"] is True
        path = f"{APPROVALS}/{approval['approvalId']}"
        r = await api.client.post(path, json={"decision": "approve"}, headers=admin("dave"))
        assert r.status_code == 403 and "only a tenant owner" in error_of(r)["message"]
        r = await api.client.post(path, json={"decision": "approve"}, headers=member("bob"))
        assert r.status_code == 403
        r = await api.client.post(path, json={"decision": "approve"}, headers=auth("alice"))
        assert r.status_code == 200, r.text


async def test_approval_rules_reject_an_unknown_approver_role(api: Api) -> None:
    r = await api.client.put(
        f"{BASE}/policies",
        json={"requireApproval": {"tools": ["write_file"], "approverRole": "member"}},
        headers=auth("alice"),
    )
    assert r.status_code == 422
    assert "approverRole" in str(error_of(r))


# ------------------------------------------------------------------ members


async def test_members_are_recorded_and_role_changes_audited(api: Api, database: Database) -> None:
    assert (await api.client.get(f"{BASE}/sessions", headers=member("bob"))).status_code == 200
    r = await api.client.get(f"{BASE}/members", headers=member("bob"))
    assert r.status_code == 403 and error_of(r)["code"] == "forbidden_role"
    assert await audit_events(database, "member.role_changed") == []

    # the same role again is served from the cache: no write, no event
    assert (await api.client.get(f"{BASE}/sessions", headers=member("bob"))).status_code == 200
    # bob's token now says admin: one change, audited
    r = await api.client.get(f"{BASE}/members", headers=admin("bob"))
    assert r.status_code == 200, r.text
    assert {m["userId"]: m["role"] for m in r.json()["members"]} == {"bob": "admin"}
    [changed] = await audit_events(database, "member.role_changed")
    assert (changed.actor_id, changed.target_type, changed.target_id) == ("bob", "member", "bob")
    assert (changed.before, changed.after) == ({"role": "member"}, {"role": "admin"})

    r = await api.client.get(f"{BASE}/members", headers=auth("alice"))
    members = {m["userId"]: m for m in r.json()["members"]}
    assert {u: m["role"] for u, m in members.items()} == {"bob": "admin", "alice": "owner"}
    assert members["bob"]["firstSeenAt"] <= members["bob"]["lastSeenAt"]
    # another tenant's owner sees only their own
    r = await api.client.get(f"{BASE}/members", headers=auth("mallory"))
    assert [m["userId"] for m in r.json()["members"]] == ["mallory"]
    async with database.owner() as s:
        rows = list(await s.scalars(select(TenantMember).order_by(TenantMember.user_id)))
    assert [(m.tenant_id, m.user_id, m.role) for m in rows] == [
        ("acme", "alice", "owner"),
        ("acme", "bob", "admin"),
        ("evil", "mallory", "owner"),
    ]
