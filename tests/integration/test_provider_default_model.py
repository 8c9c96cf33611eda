"""Which model a run posted without `agentId` uses: the tenant's default agent's.

The default agent is created with the server's `DEFAULT_MODEL` (Gemini when a Gemini key is
set); `PATCH /agents/{id}` on it changes the model of the tenant's later runs without
`agentId`, and only that tenant's. Runs go through the HTTP API, are claimed and executed as a
worker would, and talk to fake provider servers through the real SDKs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.db.engine import Database
from app.runtime.loop import execute_run
from tests.fakes import gemini_wire as g
from tests.fakes import openai_wire as o
from tests.fakes.server import FakeServer
from tests.integration.api_support import Api, auth, make_settings, running_api
from tests.integration.run_support import claim, status

pytestmark = pytest.mark.timeout(60)

AGENTS = "/api/agent-runtime/agents"
NO_PROVIDERS: dict[str, Any] = {
    "gemini_api_key": None,
    "google_api_key": None,
    "google_genai_use_vertexai": False,
    "openai_api_key": None,
    "openai_base_url": None,
    "model_max_retries": 0,
}


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    fake = FakeServer()
    await fake.start()
    yield fake
    await fake.close()


async def default_agent(api: Api, user: str = "alice") -> dict[str, Any]:
    """The tenant's default agent (`GET /agents` creates it on first use)."""
    r = await api.client.get(AGENTS, headers=auth(user))
    assert r.status_code == 200, r.text
    agent: dict[str, Any] = r.json()["agents"][0]
    assert agent["isDefault"]
    return agent


async def patch(api: Api, agent_id: str, **body: Any) -> dict[str, Any]:
    r = await api.client.patch(f"{AGENTS}/{agent_id}", json=body, headers=auth())
    assert r.status_code == 200, r.text
    changed: dict[str, Any] = r.json()
    return changed


async def run_to_end(api: Api, message: str, user: str = "alice") -> dict[str, Any]:
    """Post `message` without `agentId`, execute the run like a worker; its `/status`."""
    run = await api.post_run(message, user=user)
    leased = await claim(api, run["runId"])
    await asyncio.wait_for(execute_run(leased, settings=api.runtime.settings), 20)
    r = await api.client.get(
        "/api/agent-runtime/status", params={"runId": run["runId"]}, headers=auth(user)
    )
    assert r.status_code == 200, r.text
    found: dict[str, Any] = r.json()
    return found


async def test_patching_the_default_agent_changes_the_tenant_default_model(
    database: Database, db_url: str, server: FakeServer
) -> None:
    settings = make_settings(
        db_url,
        **{**NO_PROVIDERS, "openai_base_url": f"{server.url}/v1"},
        default_model="offline",
    )
    async with running_api(settings, database) as api:
        agent = await default_agent(api)
        assert agent["model"] == "offline"
        before = await run_to_end(api, "hello")
        assert before["result"] == {"text": "You said: hello"} and server.requests == []

        changed = await patch(api, agent["id"], model="openai:tenant-model")
        assert changed["model"] == "openai:tenant-model" and changed["isDefault"]
        server.script(o.answer("Hello from ", "the tenant's model.", tokens=(12, 6)))
        after = await run_to_end(api, "hello")
        assert after["status"] == "completed", after
        assert after["result"] == {"text": "Hello from the tenant's model."}
        by_model = {"openai:tenant-model": {"inputTokens": 12, "outputTokens": 6}}
        assert after["usage"] == {"inputTokens": 12, "outputTokens": 6, "byModel": by_model}
        [request] = server.requests
        assert request.json()["model"] == "tenant-model"

        # another tenant's default agent still has the server default
        theirs = await run_to_end(api, "hi", user="mallory")
        assert theirs["result"] == {"text": "You said: hi"} and len(server.requests) == 1


async def test_an_unconfigured_tenant_default_fails_the_run_fast(
    database: Database, db_url: str
) -> None:
    settings = make_settings(db_url, **NO_PROVIDERS, default_model="offline")
    async with running_api(settings, database) as api:
        agent = await default_agent(api)
        await patch(api, agent["id"], model="gemini-2.5-flash")
        found = await run_to_end(api, "hello")
        assert found["status"] == "failed" and found["error"] is not None
        assert found["error"]["code"] == "model_unavailable"
        assert "gemini-2.5-flash" in found["error"]["message"]
        assert "GEMINI_API_KEY" in found["error"]["message"]


async def test_a_gemini_key_makes_gemini_the_server_default(
    database: Database, db_url: str, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEFAULT_MODEL", raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", "test-gemini-key-0123456789")
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", server.url)
    values = {k: v for k, v in NO_PROVIDERS.items() if k != "gemini_api_key"}
    settings = make_settings(db_url, **values)  # the key and endpoint from the environment
    assert settings.default_model == "gemini-2.5-flash"
    async with running_api(settings, database) as api:
        r = await api.client.post(AGENTS, json={"name": "unset-model"}, headers=auth())
        assert r.status_code == 201 and r.json()["model"] == "gemini-2.5-flash"

        server.script(g.answer("Hello from ", "Gemini."))
        found = await run_to_end(api, "hello")  # creates the default agent on first use
        assert found["status"] == "completed", found
        assert found["result"] == {"text": "Hello from Gemini."}
        assert (await default_agent(api))["model"] == "gemini-2.5-flash"
        [request] = server.requests
        assert request.path.endswith("/models/gemini-2.5-flash:streamGenerateContent")
        assert (await status(api, found["runId"]))["usage"]["inputTokens"] == 10
