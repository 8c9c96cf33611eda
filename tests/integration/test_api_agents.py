"""Agents API: create, list (with the default agent), read, change; 409, 404 across tenants, 422s."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import select

from app.auth.principal import Principal
from app.db.engine import Database
from app.db.models import Agent
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api

pytestmark = pytest.mark.timeout(30)

AGENTS = "/api/agent-runtime/agents"


@pytest.fixture
async def api(database: Database, db_url: str) -> AsyncIterator[Api]:
    settings = make_settings(db_url, default_model="offline", max_turns=5)
    async with running_api(settings, database) as api:
        yield api


async def create(api: Api, user: str = "alice", **body: Any) -> dict[str, Any]:
    r = await api.client.post(AGENTS, json=body, headers=auth(user))
    assert r.status_code == 201, r.text
    created: dict[str, Any] = r.json()
    return created


async def test_create_with_defaults_and_read_back(api: Api, database: Database) -> None:
    agent = await create(api, name="helper")
    assert agent == {
        **agent,
        "name": "helper",
        "model": "offline",
        "systemPrompt": "",
        "maxTurns": 5,
        "mode": "chat",
        "timeoutSeconds": None,
        "tokenBudget": None,
        "isDefault": False,
        "ownerUserId": "alice",
    }
    uuid.UUID(agent["id"])
    assert agent["createdAt"] and agent["updatedAt"]

    r = await api.client.get(f"{AGENTS}/{agent['id']}", headers=auth())
    assert r.status_code == 200 and r.json() == agent

    async with database.tenant(Principal(user_id="alice", tenant_id="acme")) as s:
        row = await s.scalar(select(Agent).where(Agent.id == uuid.UUID(agent["id"])))
    assert row is not None and row.tenant_id == "acme"
    assert row.settings == {
        "mode": "chat",
        "timeoutSeconds": None,
        "tokenBudget": None,
        "contextWindow": None,
        "ifBusy": "enqueue",
        "maxSpawnDepth": None,
        "maxChildrenPerRun": None,
        "maxExchanges": None,
        "fallbackModels": [],
    }


async def test_create_with_every_field(api: Api) -> None:
    body = {
        "name": "planner",
        "model": "openai:gpt-4o-mini",
        "systemPrompt": "Be brief.",
        "maxTurns": 3,
        "mode": "plan",
        "timeoutSeconds": 120,
        "tokenBudget": 5000,
    }
    agent = await create(api, **body)
    assert agent == {**agent, **body}


async def test_list_creates_the_default_agent_once(api: Api) -> None:
    mine = await create(api, name="mine")
    first = await api.client.get(AGENTS, headers=auth())
    assert first.status_code == 200, first.text
    agents = first.json()["agents"]
    assert [a["name"] for a in agents] == ["default", "mine"]
    assert agents[0]["isDefault"] and agents[1] == mine
    second = await api.client.get(AGENTS, headers=auth())
    assert second.json()["agents"] == agents

    # the first run without agentId uses that same default agent
    run = await api.post_run("hi")
    sessions = await api.client.get("/api/agent-runtime/sessions", headers=auth())
    [session] = sessions.json()["sessions"]
    assert session["sessionKey"] == run["sessionKey"] and session["agentId"] == agents[0]["id"]


async def test_patch_changes_only_given_fields(api: Api, database: Database) -> None:
    agent = await create(api, name="a", mode="plan", tokenBudget=100, timeoutSeconds=30)
    async with database.owner() as s:  # another feature's key in the same settings object
        row = await s.get(Agent, uuid.UUID(agent["id"]))
        assert row is not None
        row.settings = {**row.settings, "other": {"keep": True}}

    r = await api.client.patch(
        f"{AGENTS}/{agent['id']}",
        json={"systemPrompt": "New.", "tokenBudget": None, "maxTurns": 9},
        headers=auth(),
    )
    assert r.status_code == 200, r.text
    changed = r.json()
    assert changed == {
        **agent,
        "systemPrompt": "New.",
        "tokenBudget": None,
        "maxTurns": 9,
        "updatedAt": changed["updatedAt"],
    }
    assert changed["updatedAt"] >= agent["updatedAt"]
    async with database.owner() as s:
        row = await s.get(Agent, uuid.UUID(agent["id"]))
        assert row is not None
        assert row.settings == {
            "mode": "plan",
            "timeoutSeconds": 30,
            "tokenBudget": None,
            "contextWindow": None,
            "ifBusy": "enqueue",
            "maxSpawnDepth": None,
            "maxChildrenPerRun": None,
            "maxExchanges": None,
            "fallbackModels": [],
            "other": {"keep": True},
        }

    same = await api.client.patch(f"{AGENTS}/{agent['id']}", json={}, headers=auth())
    assert same.status_code == 200 and same.json() == changed


async def test_patch_model_and_mode(api: Api, database: Database) -> None:
    agent = await create(api, name="switcher")
    assert (agent["model"], agent["mode"]) == ("offline", "chat")
    r = await api.client.patch(
        f"{AGENTS}/{agent['id']}",
        json={"model": "openai:gpt-4o-mini", "mode": "plan"},
        headers=auth(),
    )
    assert r.status_code == 200, r.text
    assert r.json() == {
        **agent,
        "model": "openai:gpt-4o-mini",
        "mode": "plan",
        "updatedAt": r.json()["updatedAt"],
    }
    again = await api.client.get(f"{AGENTS}/{agent['id']}", headers=auth())
    assert again.json() == r.json()
    async with database.owner() as s:
        row = await s.get(Agent, uuid.UUID(agent["id"]))
        assert row is not None and row.model == "openai:gpt-4o-mini"
        assert row.settings["mode"] == "plan"

    back = await api.client.patch(
        f"{AGENTS}/{agent['id']}", json={"model": "default", "mode": "chat"}, headers=auth()
    )
    assert back.status_code == 200, back.text
    assert (back.json()["model"], back.json()["mode"]) == ("default", "chat")


async def test_duplicate_names_conflict_within_a_tenant_only(api: Api) -> None:
    first = await create(api, name="twin")
    r = await api.client.post(AGENTS, json={"name": "twin"}, headers=auth())
    assert r.status_code == 409
    assert error_of(r) == {
        "code": "conflict",
        "message": "an agent named 'twin' already exists",
        "field": "name",
    }
    other = await create(api, name="other")
    r = await api.client.patch(f"{AGENTS}/{other['id']}", json={"name": "twin"}, headers=auth())
    assert r.status_code == 409 and error_of(r)["field"] == "name"

    theirs = await create(api, user="mallory", name="twin")  # another tenant: no conflict
    assert theirs["id"] != first["id"]


async def test_other_tenants_agents_are_not_found(api: Api) -> None:
    theirs = await create(api, user="mallory", name="secret", systemPrompt="hidden")
    path = f"{AGENTS}/{theirs['id']}"
    for response in (
        await api.client.get(path, headers=auth()),
        await api.client.patch(path, json={"name": "mine now"}, headers=auth()),
    ):
        assert response.status_code == 404
        assert error_of(response) == {
            "code": "not_found",
            "message": f"agent {theirs['id']} not found",
            "field": "agentId",
        }
    listed = (await api.client.get(AGENTS, headers=auth())).json()["agents"]
    assert theirs["id"] not in [a["id"] for a in listed]
    r = await api.client.get(path, headers=auth("mallory"))
    assert r.json()["name"] == "secret"  # unchanged

    # a run may not use another tenant's agent either
    r = await api.client.post(
        "/api/agent-runtime", json={"message": "hi", "agentId": theirs["id"]}, headers=auth()
    )
    assert r.status_code == 404 and error_of(r)["field"] == "agentId"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "a\nb"}, "name"),
        ({"name": "a", "mode": "autopilot"}, "mode"),
        ({"name": "a", "maxTurns": 0}, "maxTurns"),
        ({"name": "a", "maxTurns": 101}, "maxTurns"),
        ({"name": "a", "timeoutSeconds": 0}, "timeoutSeconds"),
        ({"name": "a", "timeoutSeconds": "soon"}, "timeoutSeconds"),
        ({"name": "a", "tokenBudget": -5}, "tokenBudget"),
        ({"name": "a", "model": "has space"}, "model"),
        ({"name": "a", "systemPrompt": "nul\x00"}, "systemPrompt"),
        ({"name": "a", "isDefault": True}, "isDefault"),
    ],
)
async def test_bad_create_input_names_the_field(api: Api, body: dict[str, Any], field: str) -> None:
    r = await api.client.post(AGENTS, json=body, headers=auth())
    assert r.status_code == 422, r.text
    error = error_of(r)
    assert error["code"] == "validation_error" and error["field"] == field, error


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": None}, "name"),
        ({"mode": None}, "mode"),
        ({"maxTurns": None}, "maxTurns"),
        ({"mode": "plan", "tokenBudget": 0}, "tokenBudget"),
        ({"model": None}, "model"),
        ({"model": ""}, "model"),
        ({"model": "gemini 2.5"}, "model"),
        ({"mode": "autopilot"}, "mode"),
        ({"unknown": 1}, "unknown"),
    ],
)
async def test_bad_patch_input_names_the_field(api: Api, body: dict[str, Any], field: str) -> None:
    agent = await create(api, name="a")
    r = await api.client.patch(f"{AGENTS}/{agent['id']}", json=body, headers=auth())
    assert r.status_code == 422, r.text
    assert error_of(r)["field"] == field
    unchanged = await api.client.get(f"{AGENTS}/{agent['id']}", headers=auth())
    assert unchanged.json() == agent


async def test_bad_ids_body_type_and_auth(api: Api) -> None:
    r = await api.client.get(f"{AGENTS}/not-a-uuid", headers=auth())
    assert r.status_code == 422 and error_of(r)["field"] == "agentId"
    r = await api.client.get(f"{AGENTS}/{uuid.uuid4()}", headers=auth())
    assert r.status_code == 404
    r = await api.client.post(AGENTS, content=b"name=x", headers=auth())
    assert r.status_code == 415
    r = await api.client.post(
        AGENTS, content=b"{", headers={**auth(), "Content-Type": "application/json"}
    )
    assert r.status_code == 400 and error_of(r)["code"] == "invalid_json"
    r = await api.client.get(AGENTS)
    assert r.status_code == 401
