"""HTTP runs API: enqueue, status, cancel, stored events, tenant isolation (bad input and auth:
test_api_input.py)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from app.auth.principal import Principal
from app.db.engine import Database
from app.queue.lease import LeasedRun
from app.runtime.run_state import set_loop_state
from app.runtime.usage import add_usage
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def api(database: Database, db_url: str) -> AsyncIterator[Api]:
    async with running_api(make_settings(db_url), database) as api:
        yield api


async def claim(api: Api, run_id: str, worker: str = "test-worker") -> LeasedRun:
    """Claim the next run as a fake worker (there is no worker in these tests)."""
    claimed = await api.runtime.queue.claim_next(worker, 30)
    assert claimed is not None and str(claimed.id) == run_id
    return LeasedRun(api.runtime.db, claimed, worker)


# ------------------------------------------------------------------ happy paths


async def test_post_creates_a_session_and_status_reports_queued(api: Api) -> None:
    run = await api.post_run("hello there")
    assert run["status"] == "queued" and run["sessionKey"].startswith("s_")
    uuid.UUID(run["runId"])

    r = await api.client.get(
        "/api/agent-runtime/status", params={"runId": run["runId"]}, headers=auth()
    )
    assert r.status_code == 200, r.text
    status = r.json()
    assert status == {
        **status,
        "runId": run["runId"],
        "sessionKey": run["sessionKey"],
        "status": "queued",
        "startedAt": None,
        "finishedAt": None,
        "result": None,
        "error": None,
        "usage": {"inputTokens": 0, "outputTokens": 0, "byModel": {}},
        "state": None,
        "attempts": 0,
    }
    assert status["createdAt"]


async def test_post_with_session_key_reuses_the_session(api: Api) -> None:
    first = await api.post_run("one", sessionKey="chat:1.a_b-c")
    second = await api.post_run("two", sessionKey="chat:1.a_b-c")
    assert first["sessionKey"] == second["sessionKey"] == "chat:1.a_b-c"
    assert first["runId"] != second["runId"]


async def test_completed_run_status_has_result_usage_and_attempts(api: Api) -> None:
    run = await api.post_run("compute")
    leased = await claim(api, run["runId"])
    await set_loop_state(leased, "model")
    r = await api.client.get(
        "/api/agent-runtime/status", params={"runId": run["runId"]}, headers=auth()
    )
    assert r.json()["status"] == "running" and r.json()["state"] == "model"
    assert r.json()["startedAt"] is not None
    await add_usage(leased, 12, 34, model="offline")
    await leased.finish("completed", result={"text": "42"})

    status = (
        await api.client.get(
            "/api/agent-runtime/status", params={"runId": run["runId"]}, headers=auth()
        )
    ).json()
    assert status["status"] == "completed"
    assert status["result"] == {"text": "42"} and status["error"] is None
    assert status["usage"] == {
        "inputTokens": 12,
        "outputTokens": 34,
        "byModel": {"offline": {"inputTokens": 12, "outputTokens": 34}},
    }
    assert status["attempts"] == 1 and status["finishedAt"] is not None


async def test_failed_run_status_has_error(api: Api) -> None:
    run = await api.post_run("fail")
    leased = await claim(api, run["runId"])
    await leased.finish("failed", error={"code": "model_error", "message": "boom"})
    status = (
        await api.client.get(
            "/api/agent-runtime/status", params={"runId": run["runId"]}, headers=auth()
        )
    ).json()
    assert status["status"] == "failed"
    assert status["error"] == {"code": "model_error", "message": "boom"}
    assert status["result"] is None


async def test_agent_id_of_the_tenant_is_used_and_others_are_404(
    api: Api, alice: Principal
) -> None:
    first = await api.post_run("create the default agent")
    run = await api.runtime.queue.get_run(alice, uuid.UUID(first["runId"]))
    assert run is not None
    agent_id = str(run[0].agent_id)
    assert (await api.post_run("again", agentId=agent_id))["status"] == "queued"

    r = await api.client.post(
        "/api/agent-runtime",
        json={"message": "steal", "agentId": agent_id},
        headers=auth("mallory"),
    )
    assert r.status_code == 404
    assert error_of(r)["field"] == "agentId" and error_of(r)["code"] == "not_found"
    r = await api.client.post(
        "/api/agent-runtime", json={"message": "x", "agentId": str(uuid.uuid4())}, headers=auth()
    )
    assert r.status_code == 404 and error_of(r)["field"] == "agentId"


async def test_cancel_queued_running_and_finished_runs(api: Api) -> None:
    queued = await api.post_run("a", sessionKey="lane")
    behind = await api.post_run("b", sessionKey="lane")
    r = await api.client.post(
        "/api/agent-runtime/cancel", params={"runId": behind["runId"]}, headers=auth()
    )
    assert r.status_code == 200 and r.json() == {"runId": behind["runId"], "status": "cancelled"}

    leased = await claim(api, queued["runId"])
    r = await api.client.post(
        "/api/agent-runtime/cancel", params={"runId": queued["runId"]}, headers=auth()
    )
    assert r.status_code == 200 and r.json()["status"] == "running"
    held = await api.runtime.queue.renew_leases("test-worker", [leased.run.id], 30)
    assert held == {leased.run.id: True}  # the worker sees the cancel request
    await leased.finish("cancelled")
    r = await api.client.post(
        "/api/agent-runtime/cancel", params={"runId": queued["runId"]}, headers=auth()
    )
    assert r.status_code == 200 and r.json()["status"] == "cancelled"

    done = await api.post_run("c", sessionKey="other")
    await (await claim(api, done["runId"])).finish("completed", result={"text": "ok"})
    r = await api.client.post(
        "/api/agent-runtime/cancel", params={"runId": done["runId"]}, headers=auth()
    )
    assert r.status_code == 409 and error_of(r)["code"] == "conflict"


async def test_run_events_lists_stored_events(api: Api) -> None:
    run = await api.post_run("events")
    await claim(api, run["runId"], "h:1:x")  # stores run.started
    r = await api.client.get(f"/api/agent-runtime/runs/{run['runId']}/events", headers=auth())
    assert r.status_code == 200
    events = r.json()["events"]
    assert [(e["seq"], e["type"]) for e in events] == [(1, "run.queued"), (2, "run.started")]
    assert events[1]["workerId"] == "h:1:x" and events[1]["runId"] == run["runId"]
    assert events[0]["sessionKey"] == run["sessionKey"] and "ts" in events[0]
    r = await api.client.get(
        f"/api/agent-runtime/runs/{run['runId']}/events", params={"afterSeq": 1}, headers=auth()
    )
    assert [e["seq"] for e in r.json()["events"]] == [2]
    r = await api.client.get("/api/agent-runtime/runs/nope/events", headers=auth())
    assert r.status_code == 422 and error_of(r)["field"] == "runId"
    r = await api.client.get(
        f"/api/agent-runtime/runs/{run['runId']}/events",
        params={"afterSeq": str(2**31)},
        headers=auth(),
    )
    assert r.status_code == 422 and error_of(r)["field"] == "afterSeq"


# ------------------------------------------------------------------ tenant isolation


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/agent-runtime/status"),
        ("GET", "/api/agent-runtime/stream"),
        ("POST", "/api/agent-runtime/cancel"),
    ],
)
async def test_other_tenants_run_is_404(api: Api, method: str, path: str) -> None:
    run = await api.post_run("alice's secret")
    for params in ({"runId": run["runId"]}, {"runId": str(uuid.uuid4())}):
        r = await api.client.request(method, path, params=params, headers=auth("mallory"))
        assert r.status_code == 404, r.text
        assert error_of(r) == {
            "code": "not_found",
            "message": f"run {params['runId']} not found",
            "field": "runId",
        }
    r = await api.client.get(
        f"/api/agent-runtime/runs/{run['runId']}/events", headers=auth("mallory")
    )
    assert r.status_code == 404
    # and the run is untouched for its owner
    r = await api.client.get(
        "/api/agent-runtime/status", params={"runId": run["runId"]}, headers=auth()
    )
    assert r.json()["status"] == "queued"
