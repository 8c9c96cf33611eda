"""What fuzzing the API from the outside found, kept as regular tests: tenant regexes that Python
cannot match in bounded time, a null `systemPrompt` on create, ids too long to index, and the
responses the OpenAPI document did not list."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.auth.jwt import MAX_ID_CHARS
from app.core.events import EVENT_CLASSES, EVENT_TYPES
from app.db.engine import Database
from app.tools.approval_rules import ApprovalRules
from app.tools.policy import PolicyLayer
from app.tools.policy_store import put_layer
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api

API = "/api/agent-runtime"


@pytest.fixture
async def api(db_url: str, database: Database) -> AsyncIterator[Api]:
    async with running_api(make_settings(db_url), database) as api:
        yield api


# ------------------------------------------------------------------ approval regexes


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [(r"(a)\1", "backreferences"), (r"(?=rm)", "lookahead"), ("a{5000}", "repetition")],
)
async def test_a_regex_without_a_linear_time_guarantee_is_refused_when_saved(
    api: Api, pattern: str, reason: str
) -> None:
    rule = {"tool": "run_shell", "arg": "command", "allowRegex": ["ls", pattern]}
    r = await api.client.put(
        f"{API}/policies", json={"requireApproval": {"args": [rule]}}, headers=auth()
    )
    assert r.status_code == 422, r.text
    error = error_of(r)
    assert error["field"] == "requireApproval.args.0.allowRegex"
    assert "RE2" in error["message"] and reason in error["message"], error
    assert (await api.client.get(f"{API}/policies", headers=auth())).json()["configured"] is False


async def test_the_reported_catastrophic_regex_is_stored_and_matched_in_linear_time(
    api: Api,
) -> None:
    rule = {"tool": "run_shell", "arg": "command", "allowRegex": ["(a|a)*b"]}
    r = await api.client.put(
        f"{API}/policies", json={"requireApproval": {"args": [rule]}}, headers=auth()
    )
    assert r.status_code == 200, r.text
    rules = ApprovalRules.parse(r.json()["requireApproval"])
    started = time.perf_counter()
    assert not rules.args[0].allowlisted("a" * 4096)
    assert rules.args[0].allowlisted("a" * 4095 + "b")
    assert time.perf_counter() - started < 1.0


async def test_a_policy_stored_with_a_regex_re2_refuses_is_still_served(
    api: Api, database: Database, alice: Any
) -> None:
    """Saved before the RE2 check: readable, and its regex allowlists nothing (fails closed)."""
    stored = {"args": [{"tool": "run_shell", "arg": "command", "allowRegex": [r"(ls)\1?"]}]}
    async with database.tenant(alice) as s:
        await put_layer(
            s,
            alice.tenant_id,
            None,
            PolicyLayer(
                scope="tenant", profile="coding", require_approval=ApprovalRules.parse(stored)
            ),
        )
    r = await api.client.get(f"{API}/policies", headers=auth())
    assert r.status_code == 200, r.text
    assert r.json()["requireApproval"]["args"][0]["allowRegex"] == [r"(ls)\1?"]
    r = await api.client.get(f"{API}/tools", headers=auth())
    assert r.status_code == 200, r.text


# ------------------------------------------------------------------ agents


async def test_a_null_system_prompt_on_create_means_omitted(api: Api) -> None:
    body = {"name": "nullprompt", "systemPrompt": None, "model": "offline"}
    r = await api.client.post(f"{API}/agents", json=body, headers=auth())
    assert r.status_code == 201, r.text
    assert r.json()["systemPrompt"] == ""
    # the connection survives and the same null on PATCH is still refused
    r = await api.client.patch(
        f"{API}/agents/{r.json()['id']}", json={"systemPrompt": None}, headers=auth()
    )
    assert r.status_code == 422 and error_of(r)["field"] == "systemPrompt"


# ------------------------------------------------------------------ ids in tokens

ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", f"{API}/agents", None),
    ("POST", API, {"message": "hi"}),
    ("POST", f"{API}/memory", {"content": "a fact"}),
    ("PUT", f"{API}/policies", {}),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
@pytest.mark.parametrize("which", ["sub", "tenant"])
async def test_ids_longer_than_the_limit_are_refused_at_authentication(
    api: Api, method: str, path: str, body: dict[str, Any] | None, which: str
) -> None:
    long_id = "x" * 2800
    headers = auth(long_id) if which == "sub" else auth("alice", tenant=long_id)
    r = await api.client.request(method, path, json=body, headers=headers)
    assert r.status_code == 401, r.text
    assert f"longer than {MAX_ID_CHARS} characters" in error_of(r)["message"]


async def test_ids_at_the_limit_work(api: Api) -> None:
    longest = "é" * MAX_ID_CHARS  # 2 bytes each in UTF-8
    for headers in (auth(longest), auth("alice", tenant=longest)):
        r = await api.client.post(API, json={"message": "hi"}, headers=headers)
        assert r.status_code == 202, r.text
        r = await api.client.post(f"{API}/memory", json={"content": "a fact"}, headers=headers)
        assert r.status_code == 201, r.text


# ------------------------------------------------------------------ the OpenAPI document


async def test_every_route_with_a_json_body_documents_400_413_and_415(api: Api) -> None:
    doc = (await api.client.get("/openapi.json")).json()
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            # (a raw upload, e.g. PUT …/files/{path}, takes any bytes: no 400 or 415)
            if "application/json" in operation.get("requestBody", {}).get("content", {}):
                assert {"400", "413", "415"} <= set(operation["responses"]), (method, path)


async def test_invalid_json_on_memory_routes_is_a_documented_400(api: Api) -> None:
    for path in (f"{API}/memory", f"{API}/memory/search"):
        r = await api.client.post(
            path, content=b"\x00", headers={**auth(), "Content-Type": "application/json"}
        )
        assert r.status_code == 400 and error_of(r)["code"] == "invalid_json", r.text


async def test_the_stream_documents_each_event_type_and_its_schema(api: Api) -> None:
    doc = (await api.client.get("/openapi.json")).json()
    ok = doc["paths"][f"{API}/stream"]["get"]["responses"]["200"]
    event = ok["content"]["text/event-stream"]["schema"]["properties"]
    assert event["event"]["enum"] == list(EVENT_TYPES)
    refs = [r["$ref"].rsplit("/", 1)[1] for r in event["data"]["contentSchema"]["oneOf"]]
    assert refs == [cls.__name__ for cls in EVENT_CLASSES]
    assert set(refs) <= set(doc["components"]["schemas"])
