"""`Idempotency-Key` on `POST /api/agent-runtime`: retries get the first answer and no second run,
concurrent retries make exactly one run, another body under the key is a 422, keys are per user,
expire after 24 h and are pruned; the key and its run commit together (the store, directly)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import func, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.api.idempotency import IDEMPOTENCY_HEADER, REPLAYED_HEADER
from app.auth.principal import Principal
from app.db.engine import Database
from app.db.models import IdempotencyKey, Run
from app.queue.idempotency import (
    IDEMPOTENCY_TTL,
    Answer,
    IdempotencyKeyReusedError,
    KeyedRequest,
    answer_once,
    request_hash,
)
from app.queue.manager import RunQueue
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api

pytestmark = pytest.mark.timeout(30)

PATH = "/api/agent-runtime"


@pytest.fixture
async def api(database: Database, db_url: str) -> AsyncIterator[Api]:
    async with running_api(make_settings(db_url), database) as api:
        yield api


async def post(
    api: Api, body: dict[str, Any], key: str | bytes | None, user: str = "alice", **auth_args: Any
) -> Any:
    headers: dict[str, Any] = auth(user, **auth_args)
    if key is not None:
        headers[IDEMPOTENCY_HEADER] = key
    return await api.client.post(PATH, json=body, headers=headers)


async def run_count(database: Database) -> int:
    async with database.owner() as s:
        return (await s.scalar(select(func.count()).select_from(Run))) or 0


async def stored_keys(database: Database) -> list[IdempotencyKey]:
    async with database.owner() as s:
        return list(await s.scalars(select(IdempotencyKey).order_by(IdempotencyKey.key)))


# ------------------------------------------------------------------ retries


async def test_a_retry_gets_the_first_answer_and_no_second_run(
    api: Api, database: Database
) -> None:
    body = {"message": "hello", "sessionKey": "chat:1"}
    first = await post(api, body, "key-1")
    assert first.status_code == 202, first.text
    assert REPLAYED_HEADER.lower() not in first.headers

    again = await post(api, body, "key-1")
    assert again.status_code == 202
    assert again.headers[REPLAYED_HEADER] == "true"
    assert again.json() == first.json()  # the same body (its keys in jsonb's order)
    assert await run_count(database) == 1

    [row] = await stored_keys(database)
    assert (row.tenant_id, row.user_id, row.key) == ("acme", "alice", "key-1")
    assert str(row.run_id) == first.json()["runId"] and row.status_code == 202
    assert row.response == first.json()
    assert row.expires_at - row.created_at == IDEMPOTENCY_TTL


async def test_the_replay_is_the_first_answer_even_after_the_run_moved_on(api: Api) -> None:
    first = await post(api, {"message": "hello"}, "key-1")
    run_id = first.json()["runId"]
    cancelled = await api.client.post(f"{PATH}/cancel", params={"runId": run_id}, headers=auth())
    assert cancelled.json()["status"] == "cancelled"
    again = await post(api, {"message": "hello"}, "key-1")
    assert again.json() == first.json() == {**first.json(), "status": "queued"}


async def test_the_same_json_spelled_differently_is_the_same_request(
    api: Api, database: Database
) -> None:
    first = await post(api, {"message": "hi", "sessionKey": "k"}, "key-1")
    spelled = await api.client.post(
        PATH,
        content=b'{ "sessionKey" : "k",\n  "message": "hi", "agentId": null }',
        headers={**auth(), "Content-Type": "application/json", IDEMPOTENCY_HEADER: "key-1"},
    )
    assert spelled.status_code == 202 and spelled.headers[REPLAYED_HEADER] == "true"
    assert spelled.json() == first.json()
    assert await run_count(database) == 1


async def test_without_a_key_every_post_is_a_new_run(api: Api, database: Database) -> None:
    first = await post(api, {"message": "hi"}, None)
    second = await post(api, {"message": "hi"}, None)
    assert first.json()["runId"] != second.json()["runId"]
    assert REPLAYED_HEADER.lower() not in second.headers
    assert await run_count(database) == 2 and await stored_keys(database) == []


# ------------------------------------------------------------------ misuse


@pytest.mark.parametrize(
    "other",
    [
        {"message": "something else"},
        {"message": "hello", "sessionKey": "chat:2"},
        {
            "message": "hello",
            "sessionKey": "chat:1",
            "agentId": "7b0f2a64-4a8e-4f0e-9d61-2f3c7f0b9e11",
        },
    ],
)
async def test_another_body_under_the_same_key_is_a_422(
    api: Api, database: Database, other: dict[str, Any]
) -> None:
    first = await post(api, {"message": "hello", "sessionKey": "chat:1"}, "key-1")
    assert first.status_code == 202
    reused = await post(api, other, "key-1")
    assert reused.status_code == 422, reused.text
    error = error_of(reused)
    assert error["code"] == "idempotency_key_reused"
    assert error["field"] == IDEMPOTENCY_HEADER and IDEMPOTENCY_HEADER in error["message"]
    assert await run_count(database) == 1
    # The key still answers its own request.
    again = await post(api, {"message": "hello", "sessionKey": "chat:1"}, "key-1")
    assert again.status_code == 202 and again.json() == first.json()


@pytest.mark.parametrize(
    "key",
    [
        "",
        "k" * 256,
        "caf\xe9".encode("latin-1"),  # not ASCII
        b"tab\there",  # a control character
        b"del\x7f",
    ],
    ids=["empty", "256-chars", "latin-1", "tab", "del"],
)
async def test_a_malformed_key_is_a_422_naming_the_header(
    api: Api, database: Database, key: str | bytes
) -> None:
    r = await post(api, {"message": "hi"}, key)
    assert r.status_code == 422, r.text
    error = error_of(r)
    assert error["field"] == IDEMPOTENCY_HEADER and IDEMPOTENCY_HEADER in error["message"]
    assert await run_count(database) == 0


@pytest.mark.parametrize("key", ["k" * 255, "a", "~!@#$%^&*()_+{}|:<>?` -=[]\\;',./\"", "x y"])
async def test_any_printable_ascii_key_up_to_255_characters_works(api: Api, key: str) -> None:
    first = await post(api, {"message": "hi"}, key)
    assert first.status_code == 202, first.text
    again = await post(api, {"message": "hi"}, key)
    assert again.headers[REPLAYED_HEADER] == "true" and again.json() == first.json()


async def test_a_failed_request_stores_nothing_and_can_be_retried(
    api: Api, database: Database
) -> None:
    missing = {"message": "hi", "agentId": "7b0f2a64-4a8e-4f0e-9d61-2f3c7f0b9e11"}
    failed = await post(api, missing, "key-1")
    assert failed.status_code == 404
    assert await stored_keys(database) == []
    retried = await post(api, {"message": "hi"}, "key-1")
    assert retried.status_code == 202 and REPLAYED_HEADER.lower() not in retried.headers


# ------------------------------------------------------------------ scope and lifetime


async def test_keys_are_per_user_and_per_tenant(api: Api, database: Database) -> None:
    body = {"message": "hi"}
    alice = await post(api, body, "shared")
    bob = await post(api, body, "shared", user="bob", tenant="acme")
    mallory = await post(api, body, "shared", user="mallory")
    run_ids = {r.json()["runId"] for r in (alice, bob, mallory)}
    assert len(run_ids) == 3
    assert all(REPLAYED_HEADER.lower() not in r.headers for r in (alice, bob, mallory))
    # And another user's different body under "the same" key is no conflict either.
    other = await post(api, {"message": "other"}, "shared", user="bob", tenant="acme")
    assert other.status_code == 422  # bob's own key, another body
    assert (await post(api, body, "shared", user="bob", tenant="acme")).json() == bob.json()


async def test_an_expired_key_is_a_new_key(api: Api, database: Database) -> None:
    first = await post(api, {"message": "hi"}, "key-1")
    async with database.owner() as s:
        await s.execute(
            update(IdempotencyKey).values(expires_at=func.now() - text("interval '1 s'"))
        )
    # Expired: the same body makes a new run, and so would another body.
    again = await post(api, {"message": "other"}, "key-1")
    assert again.status_code == 202 and REPLAYED_HEADER.lower() not in again.headers
    assert again.json()["runId"] != first.json()["runId"]
    [row] = await stored_keys(database)
    assert str(row.run_id) == again.json()["runId"] and row.expires_at > row.created_at


async def test_inserting_a_key_prunes_expired_keys_of_the_tenant(
    api: Api, database: Database
) -> None:
    for user, key in [("alice", "old-1"), ("alice", "old-2"), ("mallory", "old-3")]:
        assert (await post(api, {"message": "hi"}, key, user=user)).status_code == 202
    async with database.owner() as s:
        await s.execute(
            update(IdempotencyKey).values(expires_at=func.now() - text("interval '1 s'"))
        )
    bob = await post(api, {"message": "hi"}, "new", user="bob", tenant="acme")
    assert bob.status_code == 202
    keys = {(k.tenant_id, k.key) for k in await stored_keys(database)}
    # acme's expired keys went with bob's insert; evil's wait for an insert of evil's.
    assert keys == {("acme", "new"), ("evil", "old-3")}


# ------------------------------------------------------------------ concurrency


async def test_concurrent_retries_make_exactly_one_run(api: Api, database: Database) -> None:
    body = {"message": "at once", "sessionKey": "race"}
    answers = await asyncio.gather(*(post(api, body, "race-key") for _ in range(8)))
    assert [a.status_code for a in answers] == [202] * 8, [a.text for a in answers]
    assert len({a.json()["runId"] for a in answers}) == 1
    assert sum(REPLAYED_HEADER.lower() not in a.headers for a in answers) == 1
    assert await run_count(database) == 1
    assert len(await stored_keys(database)) == 1


async def test_concurrent_different_bodies_under_one_key_make_one_run(
    api: Api, database: Database
) -> None:
    answers = await asyncio.gather(
        *(post(api, {"message": f"body {i}"}, "race-key") for i in range(6))
    )
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [202] + [422] * 5, [a.text for a in answers]
    assert await run_count(database) == 1


# ------------------------------------------------------------------ the store, directly


async def test_the_key_and_its_run_commit_together(database: Database, alice: Principal) -> None:
    """A failure after the run is written but with the key (here: a status the table refuses)
    rolls back both: no run without its key, no key without its run."""
    queue = RunQueue(database)

    async def enqueue(s: AsyncSession) -> Answer:
        enqueued = await queue.enqueue_in(s, alice, message="hi")
        return Answer(run_id=enqueued.run_id, status_code=500)  # CHECK (200..299) refuses it

    request = KeyedRequest.of("k", "runs.create", {"message": "hi"})
    with pytest.raises(Exception, match="status_code"):
        async with database.tenant(alice) as s:
            await answer_once(s, alice, request, enqueue)
    assert await run_count(database) == 0 and await stored_keys(database) == []

    async def enqueue_then_fail(s: AsyncSession) -> Answer:
        await queue.enqueue_in(s, alice, message="hi")
        raise RuntimeError("crash between the run and its key")

    with pytest.raises(RuntimeError, match="crash"):
        async with database.tenant(alice) as s:
            await answer_once(s, alice, request, enqueue_then_fail)
    assert await run_count(database) == 0 and await stored_keys(database) == []


async def test_the_store_replays_and_refuses_other_requests(
    database: Database, alice: Principal
) -> None:
    queue = RunQueue(database)
    made: list[UUID] = []

    async def enqueue(s: AsyncSession) -> Answer:
        enqueued = await queue.enqueue_in(s, alice, message="hi")
        made.append(enqueued.run_id)
        return Answer(run_id=enqueued.run_id, status_code=200)  # a streamed answer: no body

    request = KeyedRequest.of("k", "chat", {"messages": [{"role": "user", "text": "hi"}]})
    async with database.tenant(alice) as s:
        first = await answer_once(s, alice, request, enqueue)
    async with database.tenant(alice) as s:
        again = await answer_once(s, alice, request, enqueue)
    assert not first.replayed and again.replayed
    assert again.answer == first.answer == Answer(run_id=made[0], status_code=200, body=None)
    assert len(made) == 1

    # The same key and body sent to another operation is another request.
    elsewhere = KeyedRequest.of("k", "runs.create", {"messages": [{"role": "user", "text": "hi"}]})
    with pytest.raises(IdempotencyKeyReusedError):
        async with database.tenant(alice) as s:
            await answer_once(s, alice, elsewhere, enqueue)
    assert len(made) == 1


def test_the_request_hash_is_of_canonical_json() -> None:
    a = request_hash("runs.create", {"message": "hé", "sessionKey": None})
    b = request_hash("runs.create", json.loads('{"sessionKey":null,   "message":"h\\u00e9"}'))
    assert a == b and len(a) == 64
    assert a != request_hash("chat", {"message": "hé", "sessionKey": None})


# ------------------------------------------------------------------ the document


async def test_the_openapi_document_describes_the_header_and_the_replay(api: Api) -> None:
    operation = (await api.client.get("/openapi.json")).json()["paths"][PATH]["post"]
    [param] = [p for p in operation["parameters"] if p["name"] == IDEMPOTENCY_HEADER]
    assert param["in"] == "header" and not param.get("required", False)
    assert param["schema"]["anyOf"][0]["maxLength"] == 255
    assert "422 idempotency_key_reused" in param["description"]
    assert REPLAYED_HEADER in operation["responses"]["202"]["headers"]
    assert "idempotency_key_reused" in operation["responses"]["422"]["description"]
