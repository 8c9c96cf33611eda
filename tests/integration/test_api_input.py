"""Bad input and bad credentials: always a 4xx JSON error naming the field, never a 500."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.db.engine import Database
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def api(database: Database, db_url: str) -> AsyncIterator[Api]:
    async with running_api(make_settings(db_url), database) as api:
        yield api


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "message"),
        ({"message": ""}, "message"),
        ({"message": "   \n\t "}, "message"),
        ({"message": "x" * 32_001}, "message"),
        ({"message": 42}, "message"),
        ({"message": None}, "message"),
        ({"message": "nul \u0000 byte"}, "message"),
        ({"message": "lone \ud800 surrogate"}, "message"),
        ({"message": "hi", "sessionKey": ""}, "sessionKey"),
        ({"message": "hi", "sessionKey": "has space"}, "sessionKey"),
        ({"message": "hi", "sessionKey": "k" * 201}, "sessionKey"),
        ({"message": "hi", "sessionKey": "nul\u0000"}, "sessionKey"),
        ({"message": "hi", "sessionKey": "slash/key"}, "sessionKey"),
        ({"message": "hi", "agentId": "not-a-uuid"}, "agentId"),
        ([{"message": "hi"}], "body"),
        ("just a string", "body"),
        (None, "body"),
    ],
)
async def test_invalid_bodies_are_422_naming_the_field(api: Api, body: Any, field: str) -> None:
    r = await api.client.post(
        "/api/agent-runtime",
        content=json.dumps(body).encode(),  # ASCII-escaped: can carry "\ud800" and "\u0000"
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert r.status_code == 422, r.text
    error = error_of(r)
    assert error["code"] == "validation_error" and error["field"] == field
    assert field in error["message"]
    assert error["details"] and error["details"][0]["field"] == field


async def test_max_length_message_is_accepted_and_huge_bodies_are_413(api: Api) -> None:
    assert (await api.post_run("x" * 32_000))["status"] == "queued"
    # the most verbose JSON of a maximal message (12 bytes a character) fits the body limit
    escaped = json.dumps({"message": "\U0001f600" * 32_000})
    assert len(escaped) > 380_000
    r = await api.client.post(
        "/api/agent-runtime",
        content=escaped,
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert r.status_code == 202, r.text
    r = await api.client.post(
        "/api/agent-runtime",
        content=json.dumps({"message": "x" * 2_000_000}),
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert r.status_code == 413, r.text
    assert error_of(r)["code"] == "payload_too_large"

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted while read
        yield b'{"message": "'
        for _ in range(20):
            yield b"x" * 100_000
        yield b'"}'

    r = await api.client.post(
        "/api/agent-runtime",
        content=chunks(),
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert r.status_code == 413, r.text
    assert error_of(r)["code"] == "payload_too_large"


async def test_missing_body_malformed_json_and_wrong_content_type(api: Api) -> None:
    r = await api.client.post("/api/agent-runtime", headers=auth())
    assert r.status_code == 422 and error_of(r)["field"] == "body"

    r = await api.client.post(
        "/api/agent-runtime",
        content=b'{"message": "hi",',
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert r.status_code == 400, r.text
    assert error_of(r)["code"] == "invalid_json" and error_of(r)["field"] == "body"
    assert "JSON" in error_of(r)["message"]

    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = auth() if content_type is None else {**auth(), "Content-Type": content_type}
        r = await api.client.post(
            "/api/agent-runtime", content=b'{"message": "hi"}', headers=headers
        )
        assert r.status_code == 415, (content_type, r.text)
        assert error_of(r)["code"] == "unsupported_media_type"

    r = await api.client.post(
        "/api/agent-runtime",
        content=b'{"message": "hi"}',
        headers={**auth(), "Content-Type": "application/json; charset=utf-8"},
    )
    assert r.status_code == 202


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/agent-runtime/status"),
        ("GET", "/api/agent-runtime/stream"),
        ("POST", "/api/agent-runtime/cancel"),
    ],
)
@pytest.mark.parametrize("run_id", [None, "", "not-a-uuid", "1234", "\u0000"])
async def test_bad_or_missing_run_id_is_422(
    api: Api, method: str, path: str, run_id: str | None
) -> None:
    params = {} if run_id is None else {"runId": run_id}
    r = await api.client.request(method, path, params=params, headers=auth())
    assert r.status_code == 422, r.text
    assert error_of(r)["field"] == "runId"


async def test_unknown_route_and_method_use_the_error_shape(api: Api) -> None:
    r = await api.client.get("/api/agent-runtime/nope", headers=auth())
    assert r.status_code == 404 and error_of(r)["code"] == "not_found"
    r = await api.client.delete("/api/agent-runtime", headers=auth())
    assert r.status_code == 405 and error_of(r)["code"] == "method_not_allowed"


# ------------------------------------------------------------------ authentication


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic YWxpY2U6cHc="},
        {"Authorization": "Bearer not-a-jwt"},
        auth(ttl_seconds=-10),
        auth(audience="anon"),
        {"Authorization": "Bearer " + auth()["Authorization"].split()[1][:-4] + "AAAA"},
    ],
    ids=["none", "empty-bearer", "basic", "garbage", "expired", "wrong-aud", "bad-signature"],
)
async def test_bad_credentials_are_401(api: Api, headers: dict[str, str]) -> None:
    for method, path, kwargs in [
        ("POST", "/api/agent-runtime", {"json": {"message": "hi"}}),
        ("GET", "/api/agent-runtime/status", {"params": {"runId": str(uuid.uuid4())}}),
        ("GET", "/api/agent-runtime/sessions", {}),
    ]:
        r = await api.client.request(method, path, headers=headers, **kwargs)
        assert r.status_code == 401, (path, r.text)
        assert error_of(r)["code"] == "unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"


async def test_server_without_jwt_secret_answers_401(database: Database, db_url: str) -> None:
    settings = make_settings(db_url, supabase_jwt_secret=None)
    async with running_api(settings, database) as api:
        for method, path in [
            ("POST", "/api/agent-runtime"),
            ("GET", "/api/agent-runtime/status?runId=" + str(uuid.uuid4())),
            ("GET", "/api/agent-runtime/stream?runId=" + str(uuid.uuid4())),
            ("GET", "/api/agent-runtime/sessions"),
        ]:
            r = await api.client.request(method, path, json={"message": "hi"}, headers=auth())
            assert r.status_code == 401, r.text
            assert "no JWT secret" in error_of(r)["message"]
        assert (await api.client.get("/healthz")).status_code == 200
