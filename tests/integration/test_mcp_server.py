"""`/mcp` with the SDK's own client: the real app served by uvicorn in-process on 127.0.0.1, a
worker running the offline model, one database for the module (each test keeps to its tenants).

Covered: the tool list and schemas, `run_agent` answering with progress and continuing a chat,
a failed run as an error result, `run_status`, `session_history`, auth (401 JSON with its
challenge, before any MCP), another tenant's and another member's runs and chats not found,
a quota as a tool error, a run outlasting the wait going on, and a caller who goes away
cancelling its run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent
from sqlalchemy import select

from app.auth.jwt import mint_token
from app.auth.principal import Principal
from app.db.engine import Database
from app.db.models import Run
from tests.integration.api_support import Api, auth, make_settings, running_api
from tests.integration.policy_support import running_worker, worker_settings

pytestmark = pytest.mark.timeout(60)


@dataclass
class Stack:
    """The app (lifespan running) served over HTTP at `url`, with a worker."""

    api: Api
    url: str


@pytest.fixture(scope="module")
async def stack(module_db_url: str) -> AsyncIterator[Stack]:
    database = Database(module_db_url, pool_size=10)
    settings = make_settings(module_db_url, mcp_run_wait_seconds=20)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    try:
        async with (
            running_api(settings, database) as api,
            running_worker(database, worker_settings(module_db_url), "mcp-w"),
        ):
            config = uvicorn.Config(api.app, lifespan="off", log_level="warning", access_log=False)
            server = uvicorn.Server(config)
            serving = asyncio.create_task(server.serve(sockets=[sock]))
            for _ in range(500):
                if server.started:
                    break
                await asyncio.sleep(0.01)
            try:
                yield Stack(api=api, url=f"http://127.0.0.1:{port}/mcp")
            finally:
                server.should_exit = True
                await asyncio.wait_for(serving, 10)
    finally:
        sock.close()
        await database.dispose()


def client(stack: Stack, headers: dict[str, str], mode: str = "auto") -> Client:
    """The SDK's client over streamable HTTP, sending `headers` (the bearer token). `mode`:
    `auto` speaks the 2026-07-28 protocol (one self-contained POST per request), `legacy` the
    initialize handshake of the earlier versions (what most desktop clients speak today)."""
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60))
    return Client(streamable_http_client(stack.url, http_client=http), mode=mode)


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def text_of(result: CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


async def call(
    stack: Stack, headers: dict[str, str], tool: str, args: dict[str, Any]
) -> CallToolResult:
    async with client(stack, headers) as c:
        return await c.call_tool(tool, args)


async def test_the_tools_are_listed_with_their_schemas(stack: Stack) -> None:
    async with client(stack, auth(tenant="t-list")) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert set(tools) == {"run_agent", "run_status", "session_history", "list_agents"}
    run_agent = tools["run_agent"]
    assert run_agent.description and "progress notifications" in run_agent.description
    schema = run_agent.input_schema
    assert set(schema["properties"]) == {"message", "sessionKey", "agentId"}
    assert schema["required"] == ["message"]
    assert run_agent.output_schema is not None
    assert {"runId", "sessionKey", "status", "text"} <= set(run_agent.output_schema["properties"])
    assert tools["session_history"].input_schema["required"] == ["sessionKey"]
    assert tools["run_status"].input_schema["required"] == ["runId"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_run_agent_answers_with_progress_and_continues_the_chat(
    stack: Stack, mode: str
) -> None:
    who = auth(tenant=f"t-run-{mode}", role="owner")
    notes: list[tuple[float, str | None]] = []

    async def progress(value: float, _total: float | None, message: str | None) -> None:
        notes.append((value, message))

    async with client(stack, who, mode) as c:
        first = await c.call_tool("run_agent", {"message": "hello"}, progress_callback=progress)
        assert not first.is_error, first
        assert text_of(first) == "You said: hello"
        out = first.structured_content
        assert out is not None and out["status"] == "completed"
        assert out["text"] == "You said: hello" and out["usage"]["outputTokens"] > 0
        assert notes, "no progress notification"
        assert [v for v, _ in notes] == sorted(v for v, _ in notes)  # progress only increases
        assert any(m and m.startswith("started") for _, m in notes), notes
        assert notes[0] == (0, f"queued: run {out['runId']} in session {out['sessionKey']}")

        audit = await stack.api.client.get(
            "/api/agent-runtime/audit",
            params={"action": "run.created", "targetId": out["runId"]},
            headers=who,
        )
        (created,) = audit.json()["events"]  # audited like a REST post, with its request id
        assert created["actorId"] == "alice" and created["requestId"].startswith("req_")

        key = out["sessionKey"]
        second = await c.call_tool("run_agent", {"message": "again", "sessionKey": key})
        assert text_of(second) == "You said: again"
        assert second.structured_content is not None
        assert second.structured_content["sessionKey"] == key
        assert second.structured_content["runId"] != out["runId"]

        status = await c.call_tool("run_status", {"runId": out["runId"]})
        assert not status.is_error and status.structured_content is not None
        assert status.structured_content["status"] == "completed"
        assert status.structured_content["result"] == {"text": "You said: hello"}
        assert status.structured_content["sessionKey"] == key

        history = await c.call_tool("session_history", {"sessionKey": key, "limit": 3})
        assert history.structured_content is not None
        assert history.structured_content["messageCount"] == 4
        assert history.structured_content["truncated"] is True
        assert [(m["role"], m["text"]) for m in history.structured_content["messages"]] == [
            ("assistant", "You said: hello"),
            ("user", "again"),
            ("assistant", "You said: again"),
        ]


async def test_a_failed_run_is_an_error_result_saying_why(stack: Stack) -> None:
    result = await call(stack, auth(tenant="t-fail"), "run_agent", {"message": "/fail"})
    assert result.is_error
    assert "failed (model_error" in text_of(result)
    assert result.structured_content is not None
    assert result.structured_content["status"] == "failed"
    assert result.structured_content["error"]["code"] == "model_error"


async def test_bad_arguments_are_tool_errors(stack: Stack) -> None:
    who = auth(tenant="t-args")
    async with client(stack, who) as c:
        bad_key = await c.call_tool("run_agent", {"message": "x", "sessionKey": "no spaces"})
        unknown_agent = await c.call_tool(
            "run_agent", {"message": "x", "agentId": "7b0f2a64-4a8e-4f0e-9d61-2f3c7f0b9e11"}
        )
    assert bad_key.is_error and "sessionKey" in text_of(bad_key)
    assert unknown_agent.is_error and "not found" in text_of(unknown_agent)


@pytest.mark.parametrize(
    ("headers", "challenge"),
    [
        ({}, 'Bearer realm="agent-runtime"'),
        (
            {"Authorization": "Bearer not-a-jwt"},
            'Bearer realm="agent-runtime", error="invalid_token"',
        ),
        (  # signed with another key
            {"Authorization": "Bearer " + mint_token("x" * 40, user_id="eve", tenant_id="t-auth")},
            None,
        ),
    ],
)
async def test_without_a_valid_token_it_is_401_json(
    stack: Stack, headers: dict[str, str], challenge: str | None
) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    r = await stack.api.client.post(
        "/mcp",
        json=body,
        headers={**headers, "Accept": "application/json, text/event-stream"},
    )
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "unauthorized"
    assert r.headers["www-authenticate"] == (
        challenge or 'Bearer realm="agent-runtime", error="invalid_token"'
    )
    with pytest.raises(BaseException) as refused:  # the SDK's client is refused as well
        async with client(stack, headers) as c:
            await c.list_tools()
    assert [type(e) for e in leaves(refused.value)] == [MCPError], refused.value


async def test_there_is_no_standalone_stream(stack: Stack) -> None:
    r = await stack.api.client.get("/mcp", headers={**auth(), "Accept": "text/event-stream"})
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json()["error"]["code"] == "method_not_allowed"


async def test_other_tenants_and_members_do_not_see_runs_or_chats(stack: Stack) -> None:
    owner = auth("alice", tenant="t-own", role="owner")
    done = await call(stack, owner, "run_agent", {"message": "the launch code"})
    assert done.structured_content is not None
    run_id, key = done.structured_content["runId"], done.structured_content["sessionKey"]
    for stranger, same_tenant in (
        (auth("mallory", tenant="t-other"), False),  # another tenant
        (auth("bob", tenant="t-own", role="member"), True),  # a member: alice's chat is private
    ):
        async with client(stack, stranger) as c:
            status = await c.call_tool("run_status", {"runId": run_id})
            history = await c.call_tool("session_history", {"sessionKey": key})
            posted = await c.call_tool("run_agent", {"message": "hi", "sessionKey": key})
        assert status.is_error and "not found" in text_of(status)
        assert history.is_error and "not found" in text_of(history)
        assert "launch code" not in text_of(status) + text_of(history)
        if same_tenant:
            assert posted.is_error and "another user's private session" in text_of(posted)
        else:  # the key is free in another tenant: a new chat of its own
            assert not posted.is_error and text_of(posted) == "You said: hi"


async def test_a_quota_is_a_tool_error(stack: Stack) -> None:
    owner = auth("quinn", tenant="t-quota", role="owner")
    r = await stack.api.client.put(
        "/api/agent-runtime/quotas", json={"runsPerMinute": 1}, headers=owner
    )
    assert r.status_code == 200, r.text
    async with client(stack, owner) as c:
        assert not (await c.call_tool("run_agent", {"message": "one"})).is_error
        refused = await c.call_tool("run_agent", {"message": "two"})
    assert refused.is_error
    assert "quota exceeded" in text_of(refused) and "runsPerMinute" in text_of(refused)


async def test_a_run_longer_than_the_wait_goes_on(stack: Stack) -> None:
    who = auth(tenant="t-wait")
    app_state = stack.api.app.state
    runtime = app_state.runtime
    short = runtime.settings.model_copy(update={"mcp_run_wait_seconds": 0.3})
    app_state.runtime = dataclasses.replace(runtime, settings=short)
    try:
        result = await call(stack, who, "run_agent", {"message": "/sleep 1500"})
    finally:
        app_state.runtime = runtime
    assert result.is_error and "MCP_RUN_WAIT_SECONDS" in text_of(result)
    assert result.structured_content is not None
    assert result.structured_content["status"] in {"queued", "running"}
    run_id = result.structured_content["runId"]
    assert run_id in text_of(result)
    for _ in range(100):  # not cancelled: it completes
        status = await call(stack, who, "run_status", {"runId": run_id})
        assert status.structured_content is not None
        if status.structured_content["status"] != "running":
            break
        await asyncio.sleep(0.1)
    assert status.structured_content["status"] == "completed"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_caller_that_goes_away_cancels_its_run(stack: Stack, mode: str) -> None:
    who = auth(tenant=f"t-cancel-{mode}")
    started = asyncio.Event()

    async def progress(_value: float, _total: float | None, message: str | None) -> None:
        if message and message.startswith("started"):
            started.set()

    async def waiting_call() -> None:
        async with client(stack, who, mode) as c:
            await c.call_tool("run_agent", {"message": "/sleep 30000"}, progress_callback=progress)

    task = asyncio.create_task(waiting_call())
    await asyncio.wait_for(started.wait(), 10)
    tenant = Principal(user_id="alice", tenant_id=f"t-cancel-{mode}", role="owner")
    async with stack.api.runtime.db.tenant(tenant) as s:
        run_ids = [str(r) for r in await s.scalars(select(Run.id))]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (run_id,) = run_ids
    for _ in range(100):
        result = await call(stack, who, "run_status", {"runId": run_id})
        assert result.structured_content is not None
        if result.structured_content["status"] == "cancelled":
            break
        await asyncio.sleep(0.1)
    assert result.structured_content["status"] == "cancelled"
