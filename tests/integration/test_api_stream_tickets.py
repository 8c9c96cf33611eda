"""Stream tickets over the API: issued for visible runs only, accepted by `/stream` alone, for one
run, until they expire, and reading under RLS as the principal they carry."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from datetime import datetime

import pytest

from app.auth.principal import Principal
from app.auth.stream_ticket import mint_ticket, ticket_key
from app.db.engine import Database
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api
from tests.integration.test_api_stream import finished_run, seqs

pytestmark = pytest.mark.timeout(30)
TICKETS = "/api/agent-runtime/stream-tickets"


@pytest.fixture
async def api(database: Database, db_url: str) -> AsyncIterator[Api]:
    settings = make_settings(db_url, sse_keepalive_seconds=0.3, stream_ticket_seconds=120)
    async with running_api(settings, database) as api:
        yield api


async def get_ticket(api: Api, run_id: str, user: str = "alice") -> str:
    r = await api.client.post(TICKETS, json={"runId": run_id}, headers=auth(user))
    assert r.status_code == 201, r.text
    ticket = r.json()["ticket"]
    assert isinstance(ticket, str)
    return ticket


def mint_for(api: Api, principal: Principal, run_id: str, ttl: int = 60, **kw: float) -> str:
    key = ticket_key(api.runtime.settings)
    assert key is not None
    return mint_ticket(key, principal, uuid.UUID(run_id), ttl_seconds=ttl, **kw)[0]


async def test_a_ticket_opens_the_stream_without_a_bearer_token(api: Api) -> None:
    run_id = await finished_run(api, deltas=2)
    before = time.time()
    r = await api.client.post(TICKETS, json={"runId": run_id}, headers=auth())
    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) == {"ticket", "expiresAt"}
    expires = datetime.fromisoformat(body["expiresAt"].replace("Z", "+00:00")).timestamp()
    assert before + 110 <= expires <= time.time() + 121
    params = {"runId": run_id, "ticket": body["ticket"]}
    for _ in range(2):  # valid again on a reconnect
        async with api.stream(params, {}) as conn:
            assert conn.status == 200, conn.body
            assert seqs(await conn.read_to_end()) == [1, 2, 3, 4, 5]
    async with api.stream(params, {"Last-Event-ID": "3"}) as conn:
        assert conn.status == 200
        assert seqs(await conn.read_to_end()) == [4, 5]


async def test_tickets_are_issued_for_visible_runs_to_bearers_only(api: Api) -> None:
    run_id = await finished_run(api)
    r = await api.client.post(TICKETS, json={"runId": run_id}, headers=auth("mallory"))
    assert r.status_code == 404 and error_of(r)["field"] == "runId"  # another tenant's run
    r = await api.client.post(TICKETS, json={"runId": str(uuid.uuid4())}, headers=auth())
    assert r.status_code == 404
    r = await api.client.post(TICKETS, json={"runId": run_id})
    assert r.status_code == 401
    r = await api.client.post(TICKETS, json={"runId": "nope"}, headers=auth())
    assert r.status_code == 422 and error_of(r)["field"] == "runId"
    ticket = await get_ticket(api, run_id)
    r = await api.client.post(
        TICKETS, json={"runId": run_id}, headers={"Authorization": f"Bearer {ticket}"}
    )
    assert r.status_code == 401  # a ticket cannot buy another ticket


async def test_a_ticket_is_useless_on_every_other_route(api: Api) -> None:
    run_id = await finished_run(api)
    ticket = await get_ticket(api, run_id)
    as_bearer = {"Authorization": f"Bearer {ticket}"}
    for method, path, params in [
        ("GET", "/api/agent-runtime/status", {"runId": run_id}),
        ("GET", f"/api/agent-runtime/runs/{run_id}/events", {}),
        ("POST", "/api/agent-runtime/cancel", {"runId": run_id}),
        ("GET", "/api/agent-runtime/sessions", {}),
        ("GET", "/api/agent-runtime/agents", {}),
    ]:
        r = await api.client.request(method, path, params=params, headers=as_bearer)
        assert r.status_code == 401, (path, r.text)
        r = await api.client.request(method, path, params={**params, "ticket": ticket})
        assert r.status_code == 401, (path, r.text)
    r = await api.client.post(
        "/api/agent-runtime", json={"message": "hi"}, params={"ticket": ticket}
    )
    assert r.status_code == 401
    # not as a bearer token on the stream route either: tickets go in `?ticket=` only
    r = await api.client.get(
        "/api/agent-runtime/stream", params={"runId": run_id}, headers=as_bearer
    )
    assert r.status_code == 401


async def test_a_ticket_is_for_its_own_run_only(api: Api) -> None:
    run_a = await finished_run(api)
    run_b = await finished_run(api)
    ticket = await get_ticket(api, run_a)
    r = await api.client.get("/api/agent-runtime/stream", params={"runId": run_b, "ticket": ticket})
    assert r.status_code == 401
    assert error_of(r) == {
        "code": "unauthorized",
        "message": "stream ticket is for another run",
        "field": "ticket",
    }


async def test_an_expired_or_forged_ticket_is_a_clear_401(api: Api) -> None:
    run_id = await finished_run(api)
    expired = mint_for(api, Principal("alice", "acme"), run_id, ttl=10, now=time.time() - 11)
    r = await api.client.get(
        "/api/agent-runtime/stream", params={"runId": run_id, "ticket": expired}
    )
    assert r.status_code == 401
    error = error_of(r)
    assert error["code"] == "unauthorized" and error["field"] == "ticket"
    assert "expired" in error["message"] and "stream-tickets" in error["message"]
    good = await get_ticket(api, run_id)
    forged = good[:-3] + ("AAA" if not good.endswith("AAA") else "BBB")
    r = await api.client.get(
        "/api/agent-runtime/stream", params={"runId": run_id, "ticket": forged}
    )
    assert r.status_code == 401 and error_of(r)["field"] == "ticket"
    r = await api.client.get(
        "/api/agent-runtime/stream", params={"runId": run_id, "ticket": "x" * 3000}
    )
    assert r.status_code == 422  # longer than any ticket


async def test_the_stream_reads_under_rls_as_the_tickets_principal(api: Api) -> None:
    run_id = await finished_run(api)
    # a genuine ticket, but for a principal of another tenant: RLS hides the run
    ticket = mint_for(api, Principal("mallory", "evil"), run_id)
    r = await api.client.get(
        "/api/agent-runtime/stream", params={"runId": run_id, "ticket": ticket}
    )
    assert r.status_code == 404


async def test_another_key_means_another_ticket(database: Database, db_url: str) -> None:
    from pydantic import SecretStr

    secret = SecretStr("shared-ticket-secret-0123456789abcdef")
    first = make_settings(db_url, stream_ticket_secret=secret)
    async with running_api(first, database) as api:
        run_id = await finished_run(api)
        ticket = await get_ticket(api, run_id)
    # a replica with the same STREAM_TICKET_SECRET (and another JWT secret) accepts it
    same = make_settings(db_url, stream_ticket_secret=secret, supabase_jwt_secret="o" * 40)
    async with (
        running_api(same, database) as api,
        api.stream({"runId": run_id, "ticket": ticket}, {}) as conn,
    ):
        assert conn.status == 200
        assert seqs(await conn.read_to_end()) == [1, 2, 3, 4, 5, 6]
    other = make_settings(db_url)  # key derived from the JWT secret instead
    async with running_api(other, database) as api:
        params = {"runId": run_id, "ticket": ticket}
        r = await api.client.get("/api/agent-runtime/stream", params=params)
        assert r.status_code == 401 and "signature" in error_of(r)["message"]
