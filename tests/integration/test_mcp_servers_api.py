"""The tenant MCP servers API and MCP tools in runs: admins only, header/env values sealed and
never returned, audited or logged, stdio refused unless enabled, URLs under the web_fetch
address rules, tenants apart; `/tools` shows the tools and why a server is unavailable; a worker
run calls an MCP tool under policy and approvals."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any
from uuid import UUID

import pytest
import structlog
from sqlalchemy import text

from app.auth.principal import Principal
from app.config import Settings
from app.core import events as ev
from app.db.engine import Database
from app.logging import configure_logging
from app.tenants.crypto import Keyring
from app.tools.mcp import store
from app.tools.mcp.config import ServerConfig
from tests.integration.api_support import SECRET, Api, auth, error_of, running_api
from tests.integration.mcp_support import SECRETS_KEY, HttpToolbox, mcp_settings
from tests.integration.policy_support import (
    executions,
    run_events,
    running_worker,
    set_policy,
    tool_line,
    wait_status,
)

SERVERS = "/api/agent-runtime/mcp-servers"
TOKEN = "Bearer mcp-secret-token-7f3a9c"
ENV_SECRET = "env-secret-value-51c2"
ADMIN = {"tenant": "acme", "role": "admin"}


@pytest.fixture(scope="module")
async def toolbox() -> AsyncIterator[HttpToolbox]:
    server = await HttpToolbox().start()
    yield server
    await server.stop()


def api_settings(db_url: str, **overrides: Any) -> Settings:
    return mcp_settings(db_url, supabase_jwt_secret=SECRET, sse_keepalive_seconds=5.0, **overrides)


@pytest.fixture
async def api(db_url: str, database: Database) -> AsyncIterator[Api]:
    async with running_api(api_settings(db_url), database) as api:
        yield api


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


def http_body(url: str, **fields: Any) -> dict[str, Any]:
    return {"transport": "http", "url": url, "headers": {"Authorization": TOKEN}, **fields}


async def put(api: Api, name: str, body: dict[str, Any], **who: Any) -> Any:
    # json.dumps escapes lone surrogates (\\ud800), which httpx's own encoder refuses
    headers = {**auth(**who), "Content-Type": "application/json"}
    return await api.client.put(f"{SERVERS}/{name}", content=json.dumps(body), headers=headers)


async def rows(database: Database, table: str, where: str = "true") -> list[dict[str, Any]]:
    async with database.owner() as s:
        found = await s.execute(text(f"SELECT * FROM {table} WHERE {where}"))  # noqa: S608
        return [dict(r) for r in found.mappings()]


async def test_attach_list_show_replace_delete_never_showing_secrets(
    api: Api, database: Database, toolbox: HttpToolbox
) -> None:
    body = http_body(toolbox.url, risk="medium", toolRisk={"add": "high"}, timeoutSeconds=5)
    r = await put(api, "box", body)
    assert r.status_code == 200, r.text
    shown = r.json()
    assert shown["headerNames"] == ["Authorization"] and "headers" not in shown
    assert (shown["transport"], shown["url"], shown["toolPrefix"]) == (
        "http",
        toolbox.url,
        "mcp__box__",
    )
    assert (shown["risk"], shown["toolRisk"], shown["timeoutSeconds"]) == (
        "medium",
        {"add": "high"},
        5,
    )
    assert shown["version"] == 1 and shown["agentId"] is None and shown["enabled"] is True

    listed = await api.client.get(SERVERS, headers=auth())
    assert [s["name"] for s in listed.json()["servers"]] == ["box"]
    one = await api.client.get(f"{SERVERS}/box?check=true", headers=auth())
    assert one.status_code == 200 and one.json()["status"] == {
        "connected": True,
        "lastError": None,
        "toolCount": 10,
    }
    # replaced without resending the headers: they are kept (the server still gets them)
    r = await put(api, "box", {"transport": "http", "url": toolbox.url, "risk": "low"})
    assert r.status_code == 200 and r.json()["version"] == 2
    assert r.json()["headerNames"] == ["Authorization"]
    for answer in (r, listed, one):
        assert TOKEN not in answer.text and "mcp-secret" not in answer.text

    [row] = await rows(database, "tenant_mcp_servers")
    assert TOKEN.encode() not in bytes(row["ciphertext"]) and row["key_id"] == "kid1"
    assert TOKEN not in json.dumps(row, default=str)
    audit = await rows(database, "audit_events", "target_type = 'mcp_server' ORDER BY id")
    assert [(a["action"], a["target_id"]) for a in audit] == [
        ("mcp_server.updated", "box"),
        ("mcp_server.updated", "box"),
    ]
    assert audit[0]["after"]["headerNames"] == ["Authorization"]
    assert audit[1]["before"]["risk"] == "medium" and audit[1]["after"]["risk"] == "low"
    assert TOKEN not in json.dumps(audit, default=str)

    assert (await api.client.delete(f"{SERVERS}/box", headers=auth())).status_code == 204
    gone = await api.client.delete(f"{SERVERS}/box", headers=auth())
    assert gone.status_code == 404 and error_of(gone)["field"] == "name"
    audit = await rows(database, "audit_events", "target_type = 'mcp_server' ORDER BY id")
    assert audit[-1]["action"] == "mcp_server.deleted" and TOKEN not in json.dumps(
        audit, default=str
    )


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
async def test_members_may_not_see_or_change_servers(api: Api, method: str) -> None:
    assert (await put(api, "box", http_body("http://127.0.0.1:9/mcp"))).status_code == 200
    path = SERVERS if method == "GET" else f"{SERVERS}/box"
    body = http_body("http://127.0.0.1:8/mcp") if method == "PUT" else None
    member = auth("bob", tenant="acme", role="member")
    r = await api.client.request(method, path, json=body, headers=member)
    assert r.status_code == 403 and error_of(r)["code"] == "forbidden_role"
    r = await api.client.request(method, path, json=body, headers=auth("carol", **ADMIN))
    assert r.status_code in (200, 204), r.text


async def test_tenants_are_apart(api: Api, database: Database) -> None:
    assert (await put(api, "box", http_body("http://127.0.0.1:9/mcp"))).status_code == 200
    assert (await api.client.get(SERVERS, headers=auth("mallory"))).json() == {"servers": []}
    r = await api.client.get(f"{SERVERS}/box", headers=auth("mallory"))
    assert r.status_code == 404
    assert (await api.client.delete(f"{SERVERS}/box", headers=auth("mallory"))).status_code == 404
    # mallory's own server of the same name is hers alone
    assert (
        await put(api, "box", http_body("http://127.0.0.1:7/mcp"), user="mallory")
    ).status_code == 200
    urls = {r["tenant_id"]: r["config"]["url"] for r in await rows(database, "tenant_mcp_servers")}
    assert urls == {"acme": "http://127.0.0.1:9/mcp", "evil": "http://127.0.0.1:7/mcp"}
    # an agent of another tenant cannot be named
    agent = await api.client.post("/api/agent-runtime/agents", json={"name": "a1"}, headers=auth())
    assert agent.status_code == 201, agent.text
    r = await put(
        api,
        "agentbox",
        http_body("http://127.0.0.1:9/mcp", agentId=agent.json()["id"]),
        user="mallory",
    )
    assert r.status_code == 422 and error_of(r)["field"] == "agentId"
    r = await put(api, "agentbox", http_body("http://127.0.0.1:9/mcp", agentId=agent.json()["id"]))
    assert r.status_code == 200 and r.json()["agentId"] == agent.json()["id"]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://169.254.169.254/mcp", "169.254.169.254 is the cloud metadata address"),
        ("http://10.0.0.7:8080/mcp", "10.0.0.7 is a private address"),
        ("http://[::ffff:192.168.1.1]/mcp", "a private address"),
        ("http://user:pw@127.0.0.1:9/mcp", "credentials"),
        ("file:///etc/passwd", "only absolute http and https"),
    ],
)
async def test_urls_are_held_to_the_web_fetch_address_rules(api: Api, url: str, why: str) -> None:
    r = await put(api, "box", http_body(url))
    assert r.status_code == 422 and error_of(r)["field"] == "url", r.text
    assert why in error_of(r)["message"]


async def test_bad_bodies_and_names_are_422(api: Api, db_url: str, database: Database) -> None:
    for name in ("Box", "a__b", "1box", "x" * 33):
        r = await put(api, name, http_body("http://127.0.0.1:9/mcp"))
        assert r.status_code == 422 and error_of(r)["field"] == "name", (name, r.text)
    for body in (
        {"transport": "http"},
        {"transport": "stdio", "url": "http://127.0.0.1:9/mcp"},
        {"transport": "http", "url": "http://127.0.0.1:9/mcp", "command": "/bin/sh"},
        http_body("http://127.0.0.1:9/mcp", headers={"Bad Header": "x"}),
        http_body("http://127.0.0.1:9/mcp", headers={"Mcp-Session-Id": "x"}),
        http_body("http://127.0.0.1:9/mcp", headers={"X-A": "line\r\nbreak"}),
        http_body("http://127.0.0.1:9/mcp", risk="extreme"),
        http_body("http://127.0.0.1:9/mcp", timeoutSeconds=0),
        http_body("http://127.0.0.1:9/mcp", headers={"X-A": "\ud800"}),
        http_body("http://127.0.0.1:9/mcp", toolRisk={"a\u0000b": "low"}),
        http_body("http://127.0.0.1:9/\u0000"),
        {"transport": "stdio", "command": "/bin/\u0000sh"},
        {"transport": "stdio", "command": "/bin/sh", "args": ["\udfff"]},
    ):
        r = await put(api, "box", body)
        assert r.status_code == 422, (body, r.text)
    # stdio: refused unless the deployment enables it
    stdio = {"transport": "stdio", "command": "/usr/bin/true", "env": {"TOKEN": ENV_SECRET}}
    async with running_api(api_settings(db_url, mcp_stdio_enabled=False), database) as off:
        r = await put(off, "local", stdio)
        assert r.status_code == 422 and error_of(r)["code"] == "stdio_disabled"
        assert error_of(r)["field"] == "transport"
    r = await put(api, "local", stdio)
    assert r.status_code == 200 and r.json()["envNames"] == ["TOKEN"]
    assert ENV_SECRET not in r.text
    [row] = await rows(database, "tenant_mcp_servers")
    assert ENV_SECRET not in json.dumps(row, default=str)
    assert ENV_SECRET.encode() not in bytes(row["ciphertext"])


async def test_tools_lists_the_servers_tools_and_why_one_is_unavailable(
    api: Api,
    toolbox: HttpToolbox,
    db_url: str,
    database: Database,
    alice: Principal,
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(api_settings(db_url), process="test")
    assert (await put(api, "box", http_body(toolbox.url))).status_code == 200
    assert (await put(api, "down", http_body("http://127.0.0.1:9/mcp"))).status_code == 200
    member = auth("bob", tenant="acme", role="member")
    r = await api.client.get("/api/agent-runtime/tools", headers=member)
    assert r.status_code == 200, r.text
    page = r.json()
    denied = {t["name"]: t for t in page["denied"]}
    assert denied["mcp__box__echo"]["source"] == "mcp:box"  # the coding profile has no mcp tools
    assert denied["mcp__box__echo"]["group"] == "mcp" and denied["mcp__box__echo"]["risk"] == "low"
    [down] = page["unavailable"]
    assert (down["source"], down["tools"]) == ("mcp:down", "mcp__down__*")
    assert "connect" in down["reason"].lower(), down
    assert TOKEN not in r.text
    # the admin allows the group: the tools are allowed for members' runs too
    await set_policy(database, alice, allow=("group:mcp",))
    page = (await api.client.get("/api/agent-runtime/tools", headers=member)).json()
    assert "mcp__box__add" in {t["name"] for t in page["allowed"]}
    # the secret was registered with the log masker when the source opened it
    structlog.get_logger("probe").warning("echo", detail=f"header {TOKEN}")
    logged = capsys.readouterr()
    assert "header ***" in logged.err or "header Bearer ***" in logged.err, logged.err[-2000:]
    assert TOKEN not in logged.err and TOKEN not in logged.out


async def test_a_worker_run_calls_mcp_tools_under_policy_and_approvals(
    api: Api, toolbox: HttpToolbox, db_url: str, database: Database, alice: Principal
) -> None:
    assert (await put(api, "box", http_body(toolbox.url))).status_code == 200
    await set_policy(database, alice, allow=("group:mcp",), approval={"risk": ["high"]})
    settings = mcp_settings(
        db_url,
        lease_seconds=3.0,
        heartbeat_seconds=0.3,
        poll_seconds=30.0,
        shutdown_grace_seconds=0.5,
    )
    message = "\n".join(
        (tool_line("mcp__box__add", a=20, b=22), tool_line("mcp__box__explode", message="boom"))
    )
    async with running_worker(database, settings, "w1"):
        run = await api.post_run(message)
        run_id = UUID(run["runId"])
        # explode is destructive (high risk): it waits for an approval; add already ran
        await wait_status(database, alice, run_id, {"awaiting_approval"})
        pending = await api.client.get(
            "/api/agent-runtime/approvals",
            params={"runId": str(run_id), "status": "pending"},
            headers=auth(),
        )
        assert pending.status_code == 200, pending.text
        [approval] = pending.json()["approvals"]
        assert (approval["tool"], approval["risk"]) == ("mcp__box__explode", "high")
        r = await api.client.post(
            f"/api/agent-runtime/approvals/{approval['approvalId']}",
            json={"decision": "approve"},
            headers=auth(),
        )
        assert r.status_code == 200, r.text
        await wait_status(database, alice, run_id, {"completed"})

    done = {e.name: e for e in await executions(database, alice, run_id)}
    assert done["mcp__box__add"].status == "completed"
    assert done["mcp__box__add"].result == {"text": '{\n  "sum": 42\n}', "structured": {"sum": 42}}
    assert done["mcp__box__explode"].status == "failed"
    assert "boom" in json.dumps(done["mcp__box__explode"].error)
    evs = await run_events(database, alice, run_id)
    started = [d["name"] for t, d in evs if t == ev.TOOL_STARTED]
    assert started == ["mcp__box__add", "mcp__box__explode"]


async def test_secrets_are_resealed_under_a_new_key(database: Database, alice: Principal) -> None:
    old = Keyring.parse(SECRETS_KEY)
    config = ServerConfig("acme", "box", "http", 0, url="http://127.0.0.1:9/", headers={"A": TOKEN})
    async with database.tenant(alice) as s:
        await store.put_server(s, alice, old, config)
        await store.put_server(s, alice, old, replace(config, name="plain", headers={}))
    rotated = Keyring.parse(f"{rotated_only()},{SECRETS_KEY}")
    async with database.owner() as s:
        first = await store.reencrypt_servers(s, rotated)
    async with database.owner() as s:
        again = await store.reencrypt_servers(s, rotated)
    assert (first.total, first.reencrypted, again.reencrypted) == (1, 1, 0)
    async with database.tenant(alice.as_service()) as s:
        loaded = await store.load_servers(s, "acme", None, lambda: Keyring.parse(rotated_only()))
    assert loaded.broken == [] and {c.name: c.headers for c in loaded.servers} == {
        "box": {"A": TOKEN},
        "plain": {},
    }


def rotated_only() -> str:
    return f"kid2:{base64.b64encode(bytes(range(1, 33))).decode()}"
