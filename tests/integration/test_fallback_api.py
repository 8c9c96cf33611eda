"""Agents API: `fallbackModels` is created, read back, changed and cleared like the other settings
(kept in `agents.settings`, other keys untouched, audited); names that no provider could serve,
duplicates, too many and null are 422s naming the field, and change nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import select

from app.db.engine import Database
from app.db.models import Agent, AuditEvent
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api

pytestmark = pytest.mark.timeout(30)

AGENTS = "/api/agent-runtime/agents"


@pytest.fixture
async def api(database: Database, db_url: str) -> AsyncIterator[Api]:
    settings = make_settings(db_url, default_model="offline", max_turns=5)
    async with running_api(settings, database) as api:
        yield api


async def test_fallback_models_are_stored_shown_changed_and_cleared(
    api: Api, database: Database
) -> None:
    r = await api.client.post(
        AGENTS,
        json={"name": "sturdy", "model": "gemini-2.5-flash", "fallbackModels": ["openai:gpt-x"]},
        headers=auth(),
    )
    assert r.status_code == 201, r.text
    agent = r.json()
    assert agent["fallbackModels"] == ["openai:gpt-x"]
    url = f"{AGENTS}/{agent['id']}"
    assert (await api.client.get(url, headers=auth())).json()["fallbackModels"] == ["openai:gpt-x"]

    both = ["models/gemini-2.5-pro", "offline"]
    r = await api.client.patch(
        url, json={"fallbackModels": both, "tokenBudget": 99}, headers=auth()
    )
    assert r.status_code == 200, r.text
    assert r.json()["fallbackModels"] == both and r.json()["tokenBudget"] == 99
    r = await api.client.patch(url, json={"mode": "plan"}, headers=auth())
    assert r.json()["fallbackModels"] == both  # untouched by other changes
    async with database.owner() as s:
        row = await s.get(Agent, agent["id"])
        assert row is not None and row.settings["fallbackModels"] == both
        audits = list(
            await s.scalars(
                select(AuditEvent)
                .where(AuditEvent.action == "agent.updated")
                .order_by(AuditEvent.id)
            )
        )
    assert audits[0].before["fallbackModels"] == ["openai:gpt-x"]
    assert audits[0].after["fallbackModels"] == both

    r = await api.client.patch(url, json={"fallbackModels": []}, headers=auth())
    assert r.status_code == 200 and r.json()["fallbackModels"] == []

    r = await api.client.post(AGENTS, json={"name": "plain"}, headers=auth())
    assert r.json()["fallbackModels"] == []


BAD: list[tuple[Any, str]] = [
    (["gpt-4o"], "not a model name of a known provider"),
    (["openai:"], "not a model name of a known provider"),
    (["claude-3"], "not a model name of a known provider"),
    (["has space"], "is not a model name"),
    (["openai:a", "offline", "openai:a"], "listed twice"),
    ([f"openai:m{i}" for i in range(6)], "at most 5"),
    ("offline", ""),
    ([7], ""),
]


async def test_bad_fallback_models_are_422s_that_change_nothing(api: Api) -> None:
    r = await api.client.post(AGENTS, json={"name": "a"}, headers=auth())
    agent = r.json()
    url = f"{AGENTS}/{agent['id']}"
    for value, says in BAD:
        r = await api.client.post(
            AGENTS, json={"name": "b", "fallbackModels": value}, headers=auth()
        )
        assert r.status_code == 422, (value, r.text)
        error = error_of(r)
        assert error["field"] == "fallbackModels" or error["field"].startswith("fallbackModels")
        assert says in error["message"], (value, error)
        r = await api.client.patch(url, json={"fallbackModels": value}, headers=auth())
        assert r.status_code == 422, (value, r.text)
    r = await api.client.patch(url, json={"fallbackModels": None}, headers=auth())
    assert r.status_code == 422 and "null" in error_of(r)["message"]
    assert (await api.client.get(url, headers=auth())).json() == agent
    names = [a["name"] for a in (await api.client.get(AGENTS, headers=auth())).json()["agents"]]
    assert "b" not in names
