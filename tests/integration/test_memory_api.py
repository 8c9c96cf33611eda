"""The memory HTTP API: CRUD, chunked documents, search, tenant isolation, 404 and 422 errors."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from app.auth.principal import Principal
from app.db.engine import Database
from app.queue.manager import RunQueue
from tests.integration.api_support import auth, error_of, make_settings, running_api
from tests.integration.memory_support import memory_client

BASE = "/api/agent-runtime/memory"


@pytest.fixture
async def client(db_url: str, database: Database) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(db_url, memory_chunk_chars=400, memory_chunk_overlap_chars=80)
    async with memory_client(settings, database) as c:
        yield c


async def post(client: httpx.AsyncClient, user: str = "alice", **body: object) -> httpx.Response:
    return await client.post(BASE, json=body, headers=auth(user))


async def test_crud(client: httpx.AsyncClient) -> None:
    r = await post(
        client, content="Deploys run from `main`.", tags=["ops", " ops", "ci"], importance=0.8
    )
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["documentId"] is None
    [entry] = created["entries"]
    assert entry["tags"] == ["ops", "ci"] and entry["importance"] == 0.8
    assert entry["embedder"] == "offline:hash-v1" and entry["embeddingDim"] == 256
    assert entry["chunkIndex"] is None and entry["accessCount"] == 0
    url = f"{BASE}/{entry['id']}"

    got = await client.get(url, headers=auth())
    assert got.status_code == 200 and got.json()["accessCount"] == 1  # reading counts

    patched = await client.patch(url, json={"importance": 0.2, "tags": ["ops"]}, headers=auth())
    assert patched.status_code == 200, patched.text
    assert patched.json()["importance"] == 0.2 and patched.json()["tags"] == ["ops"]
    assert patched.json()["content"] == "Deploys run from `main`."
    rewritten = await client.patch(
        url, json={"content": "Deploys run from `release`."}, headers=auth()
    )
    assert rewritten.json()["content"] == "Deploys run from `release`."
    assert rewritten.json()["updatedAt"] > entry["updatedAt"]

    found = await client.post(f"{BASE}/search", json={"query": "release deploys"}, headers=auth())
    assert found.status_code == 200, found.text
    body = found.json()
    assert body["embedder"] == "offline:hash-v1" and body["vectorSearch"] is True
    hit = body["results"][0]
    assert hit["id"] == entry["id"] and hit["score"] > 0
    assert set(hit["why"]) == {
        "vectorRank", "vectorSimilarity", "textRank", "textScore", "rrf", "importanceWeight",
        "recencyWeight", "ageDays", "mmrPosition", "mmrMaxSimilarity",
    }  # fmt: skip

    assert (await client.delete(url, headers=auth())).status_code == 204
    assert (await client.get(url, headers=auth())).status_code == 404
    assert (await client.delete(url, headers=auth())).status_code == 404


async def test_long_content_is_chunked(client: httpx.AsyncClient) -> None:
    sentences = [f"Fact number {i} is about topic {i % 7} and nothing else." for i in range(40)]
    r = await post(client, content=" ".join(sentences), tags=["doc"])
    assert r.status_code == 201, r.text
    created = r.json()
    chunks = created["entries"]
    assert len(chunks) > 3 and created["documentId"] is not None
    assert [c["chunkIndex"] for c in chunks] == list(range(len(chunks)))
    assert {c["documentId"] for c in chunks} == {created["documentId"]}
    assert all(len(c["content"]) <= 400 and c["tags"] == ["doc"] for c in chunks)
    first_of_second = chunks[1]["content"].split(".")[0]
    assert first_of_second in chunks[0]["content"]  # overlap: a whole sentence is repeated
    listed = await client.get(BASE, params={"documentId": created["documentId"]}, headers=auth())
    assert len(listed.json()["entries"]) == len(chunks)


async def test_list_filters_and_pages(client: httpx.AsyncClient, database: Database) -> None:
    for i in range(5):
        await post(client, content=f"note {i}", tags=["even"] if i % 2 == 0 else ["odd"])
    page = await client.get(BASE, params={"limit": 2}, headers=auth())
    assert page.status_code == 200
    first = page.json()
    assert [e["content"] for e in first["entries"]] == ["note 4", "note 3"]
    rest = await client.get(
        BASE, params={"limit": 10, "before": first["nextCursor"]}, headers=auth()
    )
    assert [e["content"] for e in rest.json()["entries"]] == ["note 2", "note 1", "note 0"]
    assert rest.json()["nextCursor"] is None
    even = await client.get(BASE, params={"tag": "even"}, headers=auth())
    assert [e["content"] for e in even.json()["entries"]] == ["note 4", "note 2", "note 0"]
    assert (await client.get(BASE, params={"tag": ["even", "odd"]}, headers=auth())).json()[
        "entries"
    ] == []


async def test_agent_and_session_references(
    client: httpx.AsyncClient, database: Database, alice: Principal
) -> None:
    run = await RunQueue(database).enqueue_run(alice, message="hi", session_key="chat:1")
    found = await RunQueue(database).get_run(alice, run.run_id)
    assert found is not None
    agent_id = str(found[0].agent_id)
    r = await post(client, content="scoped", agentId=agent_id, sessionKey="chat:1")
    assert r.status_code == 201, r.text
    entry = r.json()["entries"][0]
    assert entry["agentId"] == agent_id and entry["sessionKey"] == "chat:1"
    listed = await client.get(BASE, params={"agentId": agent_id}, headers=auth())
    assert [e["content"] for e in listed.json()["entries"]] == ["scoped"]
    # another tenant's agent and session are unknown here
    r = await post(client, "mallory", content="x", agentId=agent_id)
    assert r.status_code == 404 and error_of(r)["field"] == "agentId"
    r = await post(client, "mallory", content="x", sessionKey="chat:1")
    assert r.status_code == 404 and error_of(r)["field"] == "sessionKey"


async def test_tenant_isolation(client: httpx.AsyncClient) -> None:
    r = await post(client, content="Alice's launch codes are in the vault.")
    url = f"{BASE}/{r.json()['entries'][0]['id']}"
    for method in ("GET", "DELETE"):
        other = await client.request(method, url, headers=auth("mallory"))
        assert other.status_code == 404 and error_of(other)["field"] == "id"
    other = await client.patch(url, json={"importance": 1}, headers=auth("mallory"))
    assert other.status_code == 404
    assert (await client.get(BASE, headers=auth("mallory"))).json()["entries"] == []
    found = await client.post(
        f"{BASE}/search", json={"query": "launch codes vault"}, headers=auth("mallory")
    )
    assert found.json()["results"] == []
    mine = await client.get(url, headers=auth())
    assert mine.status_code == 200 and mine.json()["importance"] == 0.5  # untouched


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "content"),
        ({"content": ""}, "content"),
        ({"content": "   "}, "content"),
        ({"content": "a\u0000b"}, "content"),
        ({"content": "x", "importance": 1.5}, "importance"),
        ({"content": "x", "importance": "high"}, "importance"),
        ({"content": "x", "importance": True}, "importance"),
        ({"content": "x", "tags": "ops"}, "tags"),
        ({"content": "x", "tags": [""]}, "tags"),
        ({"content": "x", "tags": ["t" * 65]}, "tags"),
        ({"content": "x", "tags": [str(i) for i in range(33)]}, "tags"),
        ({"content": "x", "agentId": "nope"}, "agentId"),
        ({"content": "x", "sessionKey": "white space"}, "sessionKey"),
        ({"content": "x", "importnce": 0.1}, "importnce"),
        ({"content": "x" * 500_001}, "content"),
    ],
)
async def test_create_422(client: httpx.AsyncClient, body: dict[str, object], field: str) -> None:
    r = await client.post(BASE, json=body, headers=auth())
    assert r.status_code == 422, r.text
    assert error_of(r)["field"] == field


async def test_other_422s(client: httpx.AsyncClient) -> None:
    entry = (await post(client, content="x")).json()["entries"][0]
    url = f"{BASE}/{entry['id']}"
    cases = [
        (client.get(f"{BASE}/not-a-uuid", headers=auth()), "id"),
        (client.delete(f"{BASE}/123", headers=auth()), "id"),
        (client.patch(url, json={}, headers=auth()), "body"),
        (client.patch(url, json={"content": ""}, headers=auth()), "content"),
        (client.patch(url, json={"importance": -0.1}, headers=auth()), "importance"),
        (client.post(f"{BASE}/search", json={}, headers=auth()), "query"),
        (client.post(f"{BASE}/search", json={"query": " "}, headers=auth()), "query"),
        (client.post(f"{BASE}/search", json={"query": "x", "limit": 0}, headers=auth()), "limit"),
        (client.post(f"{BASE}/search", json={"query": "x", "limit": 51}, headers=auth()), "limit"),
        # strict: no bool, string or float passes as a count
        (
            client.post(f"{BASE}/search", json={"query": "x", "limit": True}, headers=auth()),
            "limit",
        ),
        (client.post(f"{BASE}/search", json={"query": "x", "limit": "5"}, headers=auth()), "limit"),
        (client.post(f"{BASE}/search", json={"query": "x", "limit": 5.0}, headers=auth()), "limit"),
        (
            client.post(f"{BASE}/search", json={"query": "x", "limit": None}, headers=auth()),
            "limit",
        ),
        (
            client.post(f"{BASE}/search", json={"query": "x" * 2001}, headers=auth()),
            "query",
        ),
        (client.patch(f"{BASE}/not-a-uuid", json={"tags": ["a"]}, headers=auth()), "id"),
        # an entry is one chunk (400 characters here): a longer PATCH would bypass chunking
        (client.patch(url, json={"content": "y" * 401}, headers=auth()), "content"),
        (
            client.post(f"{BASE}/search", json={"query": "x", "agentId": "1"}, headers=auth()),
            "agentId",
        ),
        (client.get(BASE, params={"limit": 0}, headers=auth()), "limit"),
        (client.get(BASE, params={"before": "garbage"}, headers=auth()), "before"),
        (  # year 1 at +14:00 is before year 1 in UTC: out of Postgres' range, not a 500
            client.get(
                BASE, params={"before": f"0001-01-01T00:00:00+14:00_{entry['id']}"}, headers=auth()
            ),
            "before",
        ),
        (client.get(BASE, params={"agentId": "x"}, headers=auth()), "agentId"),
        (client.get(BASE, params={"tag": ""}, headers=auth()), "tag"),
    ]
    for request, field in cases:
        r = await request
        assert r.status_code == 422, (field, r.text)
        assert error_of(r)["field"] == field, r.text
    unknown = await client.get(f"{BASE}/{uuid.uuid4()}", headers=auth())
    assert unknown.status_code == 404
    at_limit = await client.patch(url, json={"content": "y" * 400}, headers=auth())
    assert at_limit.status_code == 200, at_limit.text


async def test_a_body_over_the_size_limit_is_a_json_413(client: httpx.AsyncClient) -> None:
    r = await post(client, content="é" * 600_000)  # 500k characters max, 1 MiB body max
    assert r.status_code == 413 and error_of(r)["code"] == "payload_too_large"


async def test_memory_routes_ship_in_create_app(db_url: str, database: Database) -> None:
    """The router is mounted by `create_app` itself (memory_support adds nothing)."""
    async with running_api(make_settings(db_url), database) as api:
        paths = set(api.app.openapi()["paths"])
        assert {BASE, f"{BASE}/search", f"{BASE}/status", f"{BASE}/{{id}}"} <= paths
        r = await api.client.post(BASE, json={"content": "mounted"}, headers=auth())
        assert r.status_code == 201, r.text
        r = await api.client.post(f"{BASE}/search", json={"query": "mounted"}, headers=auth())
        assert [h["content"] for h in r.json()["results"]] == ["mounted"]


async def test_auth_and_media_type(client: httpx.AsyncClient) -> None:
    assert (await client.get(BASE)).status_code == 401
    r = await client.post(
        BASE, content="content=x", headers={**auth(), "content-type": "text/plain"}
    )
    assert r.status_code == 415
    r = await client.post(BASE, content="{", headers={**auth(), "content-type": "application/json"})
    assert r.status_code == 400


async def test_status_reports_pending_reembeds(client: httpx.AsyncClient) -> None:
    await post(client, content="one")
    await post(client, content="two")
    r = await client.get(f"{BASE}/status", headers=auth())
    assert r.json() == {
        "embedder": "offline:hash-v1", "dimension": 256, "total": 2, "embedded": 2, "pending": 0,
    }  # fmt: skip


async def test_misconfigured_embedder_is_503_only_where_needed(
    db_url: str, database: Database
) -> None:
    settings = make_settings(db_url, memory_embedder="gemini:gemini-embedding-001")
    async with memory_client(settings, database) as client:
        r = await post(client, content="x")
        assert r.status_code == 503 and "GEMINI_API_KEY" in error_of(r)["message"]
        r = await client.post(f"{BASE}/search", json={"query": "x"}, headers=auth())
        assert r.status_code == 503
        assert (await client.get(BASE, headers=auth())).status_code == 200
        r = await client.get(f"{BASE}/{uuid.uuid4()}", headers=auth())
        assert r.status_code == 404
        r = await client.patch(f"{BASE}/{uuid.uuid4()}", json={"tags": ["a"]}, headers=auth())
        assert r.status_code == 404
        r = await client.patch(f"{BASE}/{uuid.uuid4()}", json={"content": "y"}, headers=auth())
        assert r.status_code == 503
