"""The tenant HTTP tools API: admins only, per tenant, definitions checked (name, schema, URL,
headers, agent), the signing secret shown once (creation, rotation) and never again, header
values never shown, stored encrypted and kept out of audit events and logs; and a run through
the worker calling one under the tenant's policy and approvals."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any
from uuid import UUID, uuid4

import pytest
import structlog
from sqlalchemy import text

from app.auth.principal import Principal
from app.core import events as ev
from app.db.engine import Database
from app.logging import configure_logging
from app.tenants.crypto import Keyring
from app.tools.http import store
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api
from tests.integration.http_tool_support import ALLOW_RECEIVER, Reply, running_receiver, tool_body
from tests.integration.policy_support import (
    default_agent_id,
    executions,
    run_events,
    running_worker,
    set_policy,
    tool_line,
    wait_status,
    worker_settings,
)

TOOLS = "/api/agent-runtime/http-tools"
K1 = base64.b64encode(bytes(range(32))).decode()
SECRETS = {"secrets_key": f"kid1:{K1}", "web_allowed_networks": ALLOW_RECEIVER}
TOKEN = "Bearer tenant-token-0123456789-WXYZ"
SHORT = "abc123"
MEMBER = {"user": "bob", "tenant": "acme", "role": "member"}


@pytest.fixture
async def api(db_url: str, database: Database) -> AsyncIterator[Api]:
    async with running_api(make_settings(db_url, **SECRETS), database) as api:
        yield api


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


async def put(api: Api, name: str, body: dict[str, Any], user: str = "alice", **who: Any) -> Any:
    return await api.client.put(f"{TOOLS}/{name}", json=body, headers=auth(user, **who))


async def table(database: Database) -> list[dict[str, Any]]:
    async with database.owner() as s:
        rows = await s.execute(text("SELECT * FROM tenant_http_tools ORDER BY tenant_id, name"))
        return [dict(r) for r in rows.mappings()]


async def audit_rows(database: Database) -> list[dict[str, Any]]:
    async with database.owner() as s:
        rows = await s.execute(
            text("SELECT * FROM audit_events WHERE target_type = 'http_tool' ORDER BY id")
        )
        return [dict(r) for r in rows.mappings()]


def stored_secret(row: dict[str, Any]) -> str:
    keyring = Keyring.parse(f"kid1:{K1}")
    return keyring.open(
        store.Sealed(row["secret_key_id"], bytes(row["secret_nonce"]), bytes(row["secret_sealed"])),
        store.aad(row["tenant_id"], row["id"], "secret"),
    )


async def test_define_read_replace_rotate_delete(api: Api, database: Database) -> None:
    body = tool_body(
        "https://orders.example.com/lookup", headers={"Authorization": TOKEN, "X-Short": SHORT}
    )
    r = await put(api, "lookup", body)
    assert r.status_code == 201, r.text
    created = r.json()
    secret = created.pop("signingSecret")
    assert secret.startswith("arts_") and len(secret) > 40
    assert created["headers"] == [
        {"name": "Authorization", "last4": "WXYZ"},
        {"name": "X-Short", "last4": None},
    ]
    assert (created["name"], created["method"], created["risk"]) == ("lookup", "POST", "low")
    assert created["agentId"] is None and created["timeoutSeconds"] == 5
    shown = (await api.client.get(f"{TOOLS}/lookup", headers=auth())).json()
    assert shown == created
    listed = await api.client.get(TOOLS, headers=auth())
    assert listed.json() == {"tools": [created]}

    # replaced: 200, no secret, headers kept when omitted; the signing secret unchanged
    [row] = await table(database)
    assert stored_secret(row) == secret
    r = await put(api, "lookup", {**tool_body("https://orders.example.com/v2"), "risk": "high"})
    assert r.status_code == 200 and "signingSecret" not in r.json()
    assert r.json()["url"] == "https://orders.example.com/v2" and r.json()["risk"] == "high"
    assert [h["name"] for h in r.json()["headers"]] == ["Authorization", "X-Short"]
    [row] = await table(database)
    assert stored_secret(row) == secret
    r = await put(api, "lookup", {**tool_body("https://orders.example.com/v2"), "headers": {}})
    assert r.status_code == 200 and r.json()["headers"] == []

    # rotated: a new secret, shown once
    r = await api.client.post(f"{TOOLS}/lookup/rotate-secret", headers=auth())
    assert r.status_code == 200, r.text
    rotated = r.json()["signingSecret"]
    assert rotated != secret and r.json()["secretRotatedAt"] > created["secretRotatedAt"]
    [row] = await table(database)
    assert stored_secret(row) == rotated

    r = await api.client.delete(f"{TOOLS}/lookup", headers=auth())
    assert r.status_code == 204
    r = await api.client.delete(f"{TOOLS}/lookup", headers=auth())
    assert r.status_code == 404 and error_of(r)["field"] == "name"
    assert (await api.client.get(f"{TOOLS}/lookup", headers=auth())).status_code == 404
    assert (
        await api.client.post(f"{TOOLS}/lookup/rotate-secret", headers=auth())
    ).status_code == 404

    audit = await audit_rows(database)
    assert [(a["action"], a["target_id"], a["actor_id"]) for a in audit] == [
        ("http_tool.updated", "lookup", "alice"),
        ("http_tool.updated", "lookup", "alice"),
        ("http_tool.updated", "lookup", "alice"),
        ("http_tool.updated", "lookup", "alice"),
        ("http_tool.deleted", "lookup", "alice"),
    ]
    assert audit[0]["before"] is None and audit[0]["after"]["secretRotated"] is True
    assert audit[0]["after"]["headerNames"] == ["Authorization", "X-Short"]
    assert audit[1]["before"]["url"] == "https://orders.example.com/lookup"
    assert audit[3]["after"]["secretRotated"] is True
    dumped = json.dumps(audit, default=str)
    for value in (secret, rotated, TOKEN, SHORT, "0123456789"):
        assert value not in dumped


async def test_secrets_are_ciphertext_in_the_table(api: Api, database: Database) -> None:
    body = tool_body("https://x.example.com/", headers={"Authorization": TOKEN})
    secret = (await put(api, "lookup", body)).json()["signingSecret"]
    assert (await put(api, "lookup", body, user="mallory")).status_code == 201
    rows = await table(database)
    assert [r["tenant_id"] for r in rows] == ["acme", "evil"]
    for row in rows:
        raw = json.dumps(
            {
                k: (bytes(v).hex() if isinstance(v, memoryview | bytes) else str(v))
                for k, v in row.items()
            }
        )
        sealed = bytes(row["headers_sealed"]) + bytes(row["secret_sealed"])
        for value in (secret, TOKEN, "0123456789"):
            assert value not in raw and value.encode() not in sealed
            assert value.encode().hex() not in raw
        assert row["header_hints"] == {"Authorization": "WXYZ"}


async def test_members_may_not_see_or_change_tools(api: Api, database: Database) -> None:
    assert (await put(api, "lookup", tool_body("https://x.example.com/"))).status_code == 201
    attempts = [
        ("GET", TOOLS, None),
        ("GET", f"{TOOLS}/lookup", None),
        ("PUT", f"{TOOLS}/lookup", tool_body("https://evil.example.com/")),
        ("PUT", f"{TOOLS}/fresh", tool_body("https://evil.example.com/")),
        ("POST", f"{TOOLS}/lookup/rotate-secret", None),
        ("DELETE", f"{TOOLS}/lookup", None),
    ]
    member = auth(MEMBER["user"], tenant=MEMBER["tenant"], role=MEMBER["role"])
    for method, path, body in attempts:
        r = await api.client.request(method, path, json=body, headers=member)
        assert r.status_code == 403 and error_of(r)["code"] == "forbidden_role", (method, path)
    assert [r["url"] for r in await table(database)] == ["https://x.example.com/"]
    # the rows are invisible to a member under RLS too
    async with database.tenant(Principal(user_id="bob", tenant_id="acme", role="member")) as s:
        assert (await s.execute(text("SELECT count(*) FROM tenant_http_tools"))).scalar() == 0
    # an admin (not owner) may
    admin = auth("carol", tenant="acme", role="admin")
    assert (await api.client.get(f"{TOOLS}/lookup", headers=admin)).status_code == 200


async def test_another_tenant_sees_and_touches_nothing(api: Api, database: Database) -> None:
    assert (await put(api, "lookup", tool_body("https://x.example.com/"))).status_code == 201
    evil = auth("mallory")
    assert (await api.client.get(TOOLS, headers=evil)).json() == {"tools": []}
    for method, path in (
        ("GET", f"{TOOLS}/lookup"),
        ("DELETE", f"{TOOLS}/lookup"),
        ("POST", f"{TOOLS}/lookup/rotate-secret"),
    ):
        assert (await api.client.request(method, path, headers=evil)).status_code == 404
    # the same name in another tenant is another tool, created (201) not replaced
    r = await put(api, "lookup", tool_body("https://evil.example.com/"), user="mallory")
    assert r.status_code == 201
    shown = (await api.client.get(f"{TOOLS}/lookup", headers=auth())).json()
    assert shown["url"] == "https://x.example.com/"
    # nor may a tool be bound to another tenant's agent
    evil_agent = await default_agent_id(database, Principal(user_id="mallory", tenant_id="evil"))
    r = await put(api, "other", tool_body("https://x.example.com/", agentId=str(evil_agent)))
    assert r.status_code == 422 and error_of(r)["field"] == "agentId"


BAD_DEFINITIONS: list[tuple[str, dict[str, Any], int, str, str]] = [
    ("web_fetch", {}, 409, "name", "'web_fetch' is the name of a built-in tool"),
    ("mcp__github__x", {}, 422, "name", "namespace"),
    ("Bad-Name", {}, 422, "name", ""),
    ("lookup", {"parameters": {"type": "nope"}}, 422, "parameters", "not a valid JSON schema"),
    (
        "lookup",
        {"parameters": {"type": "string"}},
        422,
        "parameters",
        "must describe an object",
    ),
    ("lookup", {"url": "http://169.254.169.254/x"}, 422, "url", "cloud metadata address"),
    ("lookup", {"url": "http://127.0.0.2/x"}, 422, "url", "loopback"),
    ("lookup", {"url": "ftp://x.example.com/"}, 422, "url", "only absolute http and https"),
    ("lookup", {"url": "https://u:p@x.example.com/"}, 422, "url", "credentials"),
    ("lookup", {"method": "TRACE"}, 422, "method", ""),
    ("lookup", {"timeoutSeconds": 0}, 422, "timeoutSeconds", ""),
    ("lookup", {"timeoutSeconds": 500}, 422, "timeoutSeconds", ""),
    ("lookup", {"risk": "extreme"}, 422, "risk", ""),
    ("lookup", {"headers": {"Host": "internal"}}, 422, "headers", "set by the runtime"),
    ("lookup", {"headers": {"X-Agent-Runtime-Run": "x"}}, 422, "headers", "set by the runtime"),
    ("lookup", {"headers": {"X-A": "a\r\nX-B: b"}}, 422, "headers", "control"),
    ("lookup", {"headers": {"Bad Name": "x"}}, 422, "headers", "not a header name"),
    ("lookup", {"agentId": str(uuid4())}, 422, "agentId", "not found"),
    ("lookup", {"description": "a\u0000b"}, 422, "description", "NUL"),
    ("lookup", {"parameters": {"type": "object", "title": "\u0000"}}, 422, "parameters", "NUL"),
    (
        "lookup",
        {"parameters": {"type": "object", "properties": {"n": {"maximum": 1e400}}}},
        422,
        "parameters",
        "finite",
    ),
    (
        "lookup",
        {"parameters": {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}}},
        422,
        "parameters",
        "does not resolve",
    ),
    (
        "lookup",
        {"parameters": {"type": "object", "properties": {"a": {"$ref": "https://e.com/s"}}}},
        422,
        "parameters",
        "only references within the schema",
    ),
]
"""(name, change to a good body, status, field, part of the message)."""


async def test_bad_definitions_are_refused(api: Api, database: Database) -> None:
    for name, change, status, field, message in BAD_DEFINITIONS:
        body = json.dumps({**tool_body("https://x.example.com/"), **change})  # Infinity too
        headers = {**auth(), "Content-Type": "application/json"}
        r = await api.client.put(f"{TOOLS}/{name}", content=body, headers=headers)
        assert r.status_code == status, (name, change, r.text)
        error = error_of(r)
        fields = [error.get("field"), *(d["field"] for d in error.get("details") or [])]
        assert any(f is not None and f.startswith(field) for f in fields), (change, error)
        assert message in r.text, (change, r.text)
    assert await table(database) == []


async def test_without_a_secrets_key_tools_cannot_be_stored(
    db_url: str, database: Database
) -> None:
    async with running_api(make_settings(db_url), database) as api:
        r = await put(api, "lookup", tool_body("https://x.example.com/"))
    assert r.status_code == 503 and error_of(r)["code"] == "secrets_key_missing"


async def test_a_run_calls_the_tool_through_the_worker_under_policy_and_approvals(
    api: Api,
    database: Database,
    db_url: str,
    alice: Principal,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = worker_settings(db_url, log_json=True, log_level="debug", **SECRETS)
    configure_logging(settings, process="test")
    replies = {"lookup": Reply(b'{"orders": 2}'), "refund": Reply(b'{"refunded": true}')}
    async with running_receiver(**replies) as receiver:
        r = await put(
            api,
            "lookup",
            tool_body(receiver.url("/lookup"), headers={"Authorization": f" {TOKEN}\t"}),
        )
        receiver.secret = secret = r.json()["signingSecret"]
        r = await put(api, "refund", tool_body(receiver.url("/refund"), risk="high"))
        refund_secret = r.json()["signingSecret"]

        # the default profile does not allow tenant tools: listed as denied, refused if called
        tools = (await api.client.get("/api/agent-runtime/tools", headers=auth())).json()
        assert "lookup" in [t["name"] for t in tools["denied"]]
        [denied] = [t for t in tools["denied"] if t["name"] == "lookup"]
        assert (denied["group"], denied["source"], denied["risk"]) == ("http", "http", "low")
        async with running_worker(database, settings, "w1"):
            run = await api.post_run(tool_line("lookup", q="hi"))
            await wait_status(database, alice, UUID(run["runId"]), {"completed"})
            evs = await run_events(database, alice, UUID(run["runId"]))
            assert "not allowed" in dict(evs)[ev.TOOL_FAILED]["error"]
            assert receiver.received == []

            # allowed by group, high risk needs approval
            await set_policy(database, alice, allow=("group:http",), approval={"risk": ["high"]})
            run = await api.post_run(tool_line("lookup", q="hi", n=2))
            run_id = UUID(run["runId"])
            await wait_status(database, alice, run_id, {"completed"})
            parked = await api.post_run(tool_line("refund", q="order 7"))
            await wait_status(database, alice, UUID(parked["runId"]), {"awaiting_approval"})

    [got] = receiver.received  # the refund waits for its approval
    assert got.path == "/lookup" and json.loads(got.body) == {"q": "hi", "n": 2}
    assert got.headers["authorization"] == TOKEN  # stored trimmed
    assert receiver.verified(got) and got.headers["x-agent-runtime-run"] == str(run_id)
    evs = await run_events(database, alice, run_id)
    completed = dict(evs)[ev.TOOL_COMPLETED]
    assert completed["result"] == {"status": 200, "body": {"orders": 2}}
    [row] = await executions(database, alice, run_id)
    assert (row.name, row.status, row.args) == ("lookup", "completed", {"q": "hi", "n": 2})
    assert row.result == {"status": 200, "body": {"orders": 2}}
    assert got.headers["x-agent-runtime-delivery"] != ""

    # secrets never reach the logs, the events or the runs' rows
    structlog.get_logger("probe").warning("echo", detail=f"{secret} {TOKEN} {refund_secret}")
    logged = capsys.readouterr()
    assert '"event": "echo"' in logged.err and "*** *** ***" in logged.err
    for value in (secret, refund_secret, TOKEN):
        assert value not in logged.err and value not in logged.out
        assert value not in json.dumps(evs) and value not in json.dumps(row.result)
