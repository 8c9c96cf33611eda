"""sessions_list, sessions_history and sessions_send, called directly: the tenant's sessions
only, and within it the run's user's own unless the tenant policy opens the session scope; size
caps; sessions_send's checks and idempotency (its runs end to end: test_sessions_send.py)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import func, select

from app.auth.principal import Principal
from app.config import Settings
from app.core.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage
from app.db.engine import Database
from app.db.models import AgentMessage, Run
from app.queue.lease import LeasedRun
from app.queue.manager import RunQueue
from app.runtime.transcript_store import append_messages
from app.tools.base import ToolContext
from app.tools.registry import ToolRegistry
from app.tools.sessions_tools import MAX_HISTORY_CHARS, MAX_TEXT_CHARS, sessions_tools
from tests.integration.policy_support import default_agent_id, set_policy

TOOLS = ToolRegistry(sessions_tools())
Message = UserMessage | AssistantMessage | ToolResult


async def session_with(
    database: Database, who: Principal, key: str, messages: list[Message]
) -> ToolContext:
    """A session `key` whose transcript is `messages` (stored by a claimed run), as a context."""
    queue = RunQueue(database)
    await queue.enqueue_run(who, message="x", session_key=key)
    claimed = await queue.claim_next(f"w-{key}", 30)
    assert claimed is not None
    leased = LeasedRun(database, claimed, f"w-{key}")
    if messages:
        await append_messages(leased, messages)
    await leased.finish("completed", result={"text": "ok"})
    return ToolContext(
        db=database,
        principal=who,
        session_id=claimed.session_id,
        run_id=claimed.id,
        settings=Settings(_env_file=None),  # type: ignore[call-arg]
    )


async def call(ctx: ToolContext, name: str, call_id: str = "c", **args: Any) -> ToolResult:
    return await TOOLS.execute(ctx, ToolCall(id=call_id, name=name, args=args))


async def test_sessions_list_shows_the_tenants_sessions_only(
    database: Database, alice: Principal, mallory: Principal
) -> None:
    await session_with(database, mallory, "mallory-secret", [UserMessage(text="hidden")])
    await session_with(database, alice, "older", [])
    ctx = await session_with(database, alice, "current", [UserMessage(text="hi")])

    r = await call(ctx, "sessions_list")
    assert r.ok, r.error
    keys = [(s["sessionKey"], s["current"], s["messageCount"]) for s in r.result["sessions"]]
    assert keys == [("current", True, 1), ("older", False, 0)]
    assert not r.result["truncated"]
    assert r.result["sessions"][0]["lastRunAt"] is not None
    one = await call(ctx, "sessions_list", limit=1)
    assert [s["sessionKey"] for s in one.result["sessions"]] == ["current"]
    assert one.result["truncated"]
    bad = await call(ctx, "sessions_list", limit=0)
    assert not bad.ok and "invalid arguments" in (bad.error or "")


async def test_sessions_history_returns_the_latest_messages(
    database: Database, alice: Principal
) -> None:
    call_ = ToolCall(id="t1", name="read_file", args={"path": "a.txt"})
    await session_with(
        database,
        alice,
        "chat",
        [
            UserMessage(text="first"),
            AssistantMessage(text="", tool_calls=[call_]),
            ToolResult(tool_call_id="t1", name="read_file", ok=True, result={"content": "A"}),
            ToolResult(tool_call_id="t2", name="write_file", ok=False, error="nope"),
            AssistantMessage(text="done"),
        ],
    )
    ctx = await session_with(database, alice, "here", [])
    r = await call(ctx, "sessions_history", sessionKey="chat")
    assert r.ok, r.error
    assert r.result["sessionKey"] == "chat" and r.result["messageCount"] == 5
    assert r.result["messages"] == [
        {"seq": 1, "role": "user", "text": "first"},
        {
            "seq": 2,
            "role": "assistant",
            "text": "",
            "toolCalls": [{"name": "read_file", "args": '{"path": "a.txt"}'}],
        },
        {"seq": 3, "role": "tool", "name": "read_file", "ok": True, "result": '{"content": "A"}'},
        {"seq": 4, "role": "tool", "name": "write_file", "ok": False, "error": "nope"},
        {"seq": 5, "role": "assistant", "text": "done"},
    ]
    assert not r.result["truncated"]
    last = await call(ctx, "sessions_history", sessionKey="chat", limit=2)
    assert [m["seq"] for m in last.result["messages"]] == [4, 5] and last.result["truncated"]


async def test_sessions_history_of_another_tenant_is_not_found(
    database: Database, alice: Principal, mallory: Principal
) -> None:
    await session_with(database, alice, "alice-chat", [UserMessage(text="private")])
    ctx = await session_with(database, mallory, "mine", [])
    r = await call(ctx, "sessions_history", sessionKey="alice-chat")
    assert not r.ok and r.error == "no such session: alice-chat"
    listed = await call(ctx, "sessions_list")
    assert [s["sessionKey"] for s in listed.result["sessions"]] == ["mine"]


async def test_sessions_history_caps_what_it_returns(database: Database, alice: Principal) -> None:
    long = "x" * (MAX_TEXT_CHARS + 500)
    many = [UserMessage(text=f"{i}" + long) for i in range(40)]
    ctx = await session_with(database, alice, "big", many)
    r = await call(ctx, "sessions_history", sessionKey="big", limit=40)
    messages = r.result["messages"]
    first = messages[0]["text"]
    assert first.endswith(
        f"…[truncated {len(many[messages[0]['seq'] - 1].text) - MAX_TEXT_CHARS} chars]"
    )
    assert len(messages[0]["text"]) < MAX_TEXT_CHARS + 30
    assert sum(len(m["text"]) for m in messages) <= MAX_HISTORY_CHARS
    assert 0 < len(messages) < 40 and r.result["truncated"]
    assert messages[-1]["seq"] == 40  # the newest are kept


@pytest.fixture
def bob(alice: Principal) -> Principal:
    """Another user of alice's tenant."""
    return Principal(user_id="bob", tenant_id=alice.tenant_id)


async def test_another_users_sessions_are_hidden_by_default(
    database: Database, alice: Principal, bob: Principal
) -> None:
    await session_with(database, bob, "bob-chat", [UserMessage(text="bob's private notes")])
    ctx = await session_with(database, alice, "alice-chat", [])

    listed = await call(ctx, "sessions_list")
    assert [s["sessionKey"] for s in listed.result["sessions"]] == ["alice-chat"]
    read = await call(ctx, "sessions_history", sessionKey="bob-chat")
    assert not read.ok and read.error == "no such session: bob-chat"
    sent = await call(ctx, "sessions_send", sessionKey="bob-chat", message="hello bob")
    assert not sent.ok and sent.error == "no such session: bob-chat"
    async with database.tenant(alice) as s:
        assert await s.scalar(select(func.count()).select_from(AgentMessage)) == 0
        assert await s.scalar(select(func.count()).select_from(Run)) == 2  # nothing queued


async def test_tenant_session_scope_opens_the_tenants_sessions(
    database: Database, alice: Principal, bob: Principal
) -> None:
    await set_policy(database, alice, session_scope="tenant")
    await session_with(database, bob, "bob-chat", [UserMessage(text="shared notes")])
    ctx = await session_with(database, alice, "alice-chat", [])

    listed = await call(ctx, "sessions_list")
    assert {s["sessionKey"] for s in listed.result["sessions"]} == {"alice-chat", "bob-chat"}
    read = await call(ctx, "sessions_history", sessionKey="bob-chat")
    assert read.ok and read.result["messages"][0]["text"] == "shared notes"
    sent = await call(ctx, "sessions_send", sessionKey="bob-chat", message="hello bob")
    assert sent.ok, sent.error
    assert sent.result["sessionKey"] == "bob-chat"

    # an agent's policy narrows it back to the user's own sessions
    await set_policy(
        database, alice, agent_id=await default_agent_id(database, alice), session_scope="user"
    )
    listed = await call(ctx, "sessions_list")
    assert [s["sessionKey"] for s in listed.result["sessions"]] == ["alice-chat"]
    again = await call(ctx, "sessions_send", call_id="c2", sessionKey="bob-chat", message="hi")
    assert not again.ok and again.error == "no such session: bob-chat"


async def test_sessions_send_posts_once_per_tool_call(database: Database, alice: Principal) -> None:
    await session_with(database, alice, "target", [])
    ctx = await session_with(database, alice, "sender", [])

    first = await call(ctx, "sessions_send", call_id="call-1", sessionKey="target", message="hi")
    again = await call(ctx, "sessions_send", call_id="call-1", sessionKey="target", message="hi")
    assert first.ok and again.ok, (first.error, again.error)
    assert first.result == again.result and first.result["sessionKey"] == "target"
    async with database.tenant(alice) as s:
        [sent] = list(await s.scalars(select(AgentMessage)))
        queued = await s.get(Run, UUID(first.result["runId"]))
    assert sent.target_run_id == queued.id and sent.tool_call_id == "call-1"  # type: ignore[union-attr]
    assert sent.origin_run_id == ctx.run_id and not sent.wait_for_reply
    assert queued is not None and queued.status == "queued"
    assert queued.input == {
        "message": "hi",
        "from": {"sessionKey": "sender", "runId": str(ctx.run_id), "originRunId": str(ctx.run_id)},
    }
    other = await call(ctx, "sessions_send", call_id="call-2", sessionKey="target", message="hi")
    assert other.ok and other.result["runId"] != first.result["runId"]


async def test_sessions_send_refuses_its_own_session_and_bad_arguments(
    database: Database, alice: Principal
) -> None:
    ctx = await session_with(database, alice, "here", [])
    own = await call(ctx, "sessions_send", sessionKey="here", message="hello me")
    assert not own.ok and "cannot send to the current session" in (own.error or "")
    missing = await call(ctx, "sessions_send", sessionKey="nowhere", message="hi")
    assert not missing.ok and missing.error == "no such session: nowhere"
    empty = await call(ctx, "sessions_send", sessionKey="here", message="")
    assert not empty.ok and "invalid arguments" in (empty.error or "")
    long = await call(ctx, "sessions_send", sessionKey="here", message="x" * 20_001)
    assert not long.ok and "invalid arguments" in (long.error or "")
    slow = await call(ctx, "sessions_send", sessionKey="x", message="hi", timeoutSeconds=3601)
    assert not slow.ok and "invalid arguments" in (slow.error or "")
