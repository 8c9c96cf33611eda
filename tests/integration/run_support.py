"""Helpers for driving runs through the HTTP API without a worker (plan mode and limits tests).

Runs are claimed with `RunQueue.claim_next` and executed with `execute_run` on a `LeasedRun`,
as a worker would; what they did is read back over the API.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import text

from app.core import events as ev
from app.core.transcript import UserMessage
from app.llm.base import Model, ModelEvent, ModelRequest
from app.llm.offline import OfflineModel
from app.llm.registry import ModelRegistry
from app.queue.lease import LeasedRun
from tests.integration.api_support import Api, auth


class Recording(Model):
    """The offline model, recording requests; the call for plan step `block_at` never ends."""

    name = "offline"

    def __init__(self, block_at: int | None = None) -> None:
        self.inner = OfflineModel()
        self.block_at = block_at
        self.requests: list[ModelRequest] = []
        self.blocked = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        last = request.messages[-1]
        if isinstance(last, UserMessage) and last.step is not None and last.step == self.block_at:
            self.blocked.set()
            await asyncio.Event().wait()
        async for event in self.inner.stream(request):
            yield event


def registry_of(model: Model) -> ModelRegistry:
    """A registry serving `model` as `offline`."""
    models = ModelRegistry()
    models.register("offline", lambda _name: model)
    return models


async def create_agent(api: Api, name: str, **body: Any) -> str:
    """Create an agent of alice's tenant over the API; its id."""
    r = await api.client.post(
        "/api/agent-runtime/agents", json={"name": name, **body}, headers=auth()
    )
    assert r.status_code == 201, r.text
    agent_id: str = r.json()["id"]
    return agent_id


async def claim(api: Api, run_id: str, worker: str = "w1") -> LeasedRun:
    """Claim the run as a worker would (the claim stores its `run.started`/`run.resumed`)."""
    claimed = await api.runtime.queue.claim_next(worker, 30)
    assert claimed is not None and str(claimed.id) == run_id
    assert claimed.started_stored
    return LeasedRun(api.runtime.db, claimed, worker)


async def crash_and_resume(api: Api, dead: LeasedRun) -> LeasedRun:
    """Expire the dead worker's lease, recover the run and claim it again."""
    async with api.runtime.db.owner() as s:
        await s.execute(
            text(
                "UPDATE agent_run_queue SET lease_expires_at = now() - interval '1 s' WHERE id = :id"
            ),
            {"id": dead.run.id},
        )
    assert await api.runtime.queue.recover_expired() == [dead.run.id]
    return await claim(api, str(dead.run.id), worker="w2")


async def events(api: Api, run_id: str) -> list[dict[str, Any]]:
    """The run's events over `/runs/{runId}/events` (checking seqs 1, 2, … without gaps)."""
    r = await api.client.get(
        f"/api/agent-runtime/runs/{run_id}/events", params={"limit": 1000}, headers=auth()
    )
    assert r.status_code == 200, r.text
    found: list[dict[str, Any]] = r.json()["events"]
    assert [e["seq"] for e in found] == list(range(1, len(found) + 1))
    return found


def of_type(found: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    """The events of one type."""
    return [e for e in found if e["type"] == type_]


def states_of(found: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The `state.changed` moves, in order."""
    return [(e["from"], e["to"]) for e in of_type(found, ev.STATE_CHANGED)]


async def status(api: Api, run_id: str) -> dict[str, Any]:
    """`GET /status` of the run."""
    r = await api.client.get("/api/agent-runtime/status", params={"runId": run_id}, headers=auth())
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body
