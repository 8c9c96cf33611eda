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
        auth(ttl_seconds=-120),  # beyond JWT_LEEWAY_SECONDS (30)
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


# ------------------------------------------------------------------ hostile bodies


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b'{"message": "\xff"}', "UTF-8"),  # not UTF-8 at all
        (b'{"message": "caf\xe9"}', "UTF-8"),  # Latin-1, as a misconfigured client sends it
        (b'{"message": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
        (b'{"message": ' + b"9" * 5_000 + b"}", "number"),  # over Python's int digit limit
    ],
    ids=["xff", "latin-1", "deep-nesting", "huge-int"],
)
async def test_undecodable_bodies_are_400_naming_the_body(
    api: Api, content: bytes, reason: str
) -> None:
    r = await api.client.post(
        "/api/agent-runtime",
        content=content,
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert r.status_code == 400, r.text
    error = error_of(r)
    assert error["code"] == "invalid_json" and error["field"] == "body", error
    assert reason in error["message"], error


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (b"[]", "body"),
        (b"null", "body"),
        (b"42", "body"),
        (b'{"message": "\xed\xa0\x80"}', "message"),  # an encoded lone surrogate
        (b'{"message": 1e999999}', "message"),  # parses as infinity
        (b'{"message": NaN}', "message"),
        (b'{"message": -Infinity}', "message"),
        (b'{"message": {"nested": [1, 2, {"deeper": 1e308}]}}', "message"),
        (b'{"message": ["a", "b"]}', "message"),
        (b'{"message": true}', "message"),
        (b'{"message": "hi", "sessionKey": 12345678901234567890}', "sessionKey"),
        (b'{"message": "hi", "agentId": ["x"]}', "agentId"),
    ],
)
async def test_hostile_json_is_422_naming_the_field(api: Api, content: bytes, field: str) -> None:
    r = await api.client.post(
        "/api/agent-runtime",
        content=content,
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert r.status_code == 422, r.text
    assert error_of(r)["field"] == field


@pytest.mark.parametrize(
    "content",
    [
        b"\xef\xbb\xbf" + b'{"message": "hi"}',  # UTF-8 byte order mark
        '{"message": "hi"}'.encode("utf-16"),  # JSON may come in UTF-16 (RFC 8259 readers)
        b'{"message": "dup", "message": "hi"}',  # duplicate keys: the last one wins
        b'{"message": "hi", "unknown": {"a": [1, 2, 3]}}',  # unknown fields are ignored
    ],
    ids=["bom", "utf-16", "duplicate-key", "unknown-field"],
)
async def test_odd_but_decodable_bodies_never_500(api: Api, content: bytes) -> None:
    r = await api.client.post(
        "/api/agent-runtime",
        content=content,
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert r.status_code < 500, r.text
    if r.status_code != 202:
        assert error_of(r)["field"] == "body"


async def test_a_2_mb_body_is_413_whatever_it_contains(api: Api) -> None:
    for content in (b"\xff" * 2_000_000, b"[" * 2_000_000, b'{"message": "' + b"a" * 2_000_000):
        r = await api.client.post(
            "/api/agent-runtime",
            content=content,
            headers={**auth(), "Content-Type": "application/json"},
        )
        assert r.status_code == 413, r.text[:200]
        assert error_of(r)["code"] == "payload_too_large"
