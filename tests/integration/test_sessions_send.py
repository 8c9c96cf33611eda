"""sessions_send end to end: real workers running the agent loop with the offline model, scripted
through the messages (`/tool sessions_send {...}`).

A message starts a run in the target session whose user message says who sent it; waiting for
the reply parks the sender `waiting` and the reply comes back as the call's result; a reply after
the timeout is injected later; two agents messaging each other stop at the cap; another user's
session cannot be messaged."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import select, update

from app.auth.principal import Principal
from app.core import events as ev
from app.core.transcript import ToolResult, UserMessage, load_message
from app.db.engine import Database
from app.db.models import Agent, AgentMessage, Run, RunInboxItem, SessionMessage
from app.queue.manager import RunQueue
from app.worker.worker import Worker
from tests.integration.policy_support import (
    SleepTool,
    catalog_with,
    default_agent_id,
    run_events,
    running_worker,
    set_policy,
    tool_line,
    wait_status,
    worker_settings,
)


@pytest.fixture
async def worker(database: Database, db_url: str, alice: Principal) -> AsyncIterator[Worker]:
    await set_policy(database, alice, allow=["group:sessions"])
    settings = worker_settings(db_url, worker_concurrency=6)
    async with running_worker(database, settings, "w1", catalog_with(SleepTool("nap"))) as w:
        yield w


async def post(db: Database, who: Principal, message: str, key: str) -> UUID:
    return (await RunQueue(db).enqueue_run(who, message=message, session_key=key)).run_id


async def session(db: Database, who: Principal, key: str) -> None:
    """Session `key` exists (one completed run)."""
    await wait_status(db, who, await post(db, who, "hello", key), {"completed"})


async def transcript(db: Database, who: Principal, run_id: UUID) -> list[Any]:
    async with db.tenant(who) as s:
        rows = await s.scalars(
            select(SessionMessage)
            .where(SessionMessage.run_id == run_id)
            .order_by(SessionMessage.seq)
        )
        return [load_message(r.payload) for r in rows]


async def tool_results(db: Database, who: Principal, run_id: UUID) -> list[ToolResult]:
    return [m for m in await transcript(db, who, run_id) if isinstance(m, ToolResult)]


async def sent_messages(db: Database, who: Principal) -> list[AgentMessage]:
    async with db.tenant(who) as s:
        return list(await s.scalars(select(AgentMessage).order_by(AgentMessage.created_at)))


async def run_row(db: Database, who: Principal, run_id: UUID) -> Run:
    async with db.tenant(who) as s:
        run = await s.get(Run, run_id)
    assert run is not None
    return run


async def test_send_without_waiting_starts_a_run_that_knows_its_sender(
    worker: Worker, database: Database, alice: Principal
) -> None:
    await session(database, alice, "b")
    sender = await post(
        database, alice, tool_line("sessions_send", sessionKey="b", message="ping from a"), "a"
    )
    await wait_status(database, alice, sender, {"completed"})

    [result] = await tool_results(database, alice, sender)
    assert result.ok, result.error
    assert result.result["sessionKey"] == "b" and set(result.result) == {"runId", "sessionKey"}
    target = UUID(result.result["runId"])
    await wait_status(database, alice, target, {"completed"})
    first = (await transcript(database, alice, target))[0]
    assert isinstance(first, UserMessage) and first.text == "ping from a"
    assert first.source is not None and first.source.kind == "agent"
    assert (first.source.run_id, first.source.session_key) == (str(sender), "a")
    assert (await run_row(database, alice, target)).result == {"text": "You said: ping from a"}

    [sent] = await sent_messages(database, alice)
    assert (sent.sender_run_id, sent.target_run_id, sent.origin_run_id) == (sender, target, sender)
    assert not sent.wait_for_reply
    # no reply is delivered when nobody waits for it
    async with database.tenant(alice) as s:
        assert list(await s.scalars(select(RunInboxItem))) == []


async def test_waiting_for_the_reply_parks_the_sender_until_it_arrives(
    worker: Worker, database: Database, alice: Principal
) -> None:
    await session(database, alice, "b")
    ask = tool_line("sessions_send", sessionKey="b", message="/sleep 1500\npong", waitForReply=True)
    sender = await post(database, alice, ask, "a")

    await wait_status(database, alice, sender, {"waiting"})
    parked = await run_row(database, alice, sender)
    assert parked.lease_owner is None and parked.wake_at is not None
    assert sender not in worker.active_runs  # no slot held while it waits

    await wait_status(database, alice, sender, {"completed"})
    [sent] = await sent_messages(database, alice)
    assert sent.target_run_id is not None and sent.wait_for_reply
    reply_text = "You said: /sleep 1500\npong"
    assert (await run_row(database, alice, sent.target_run_id)).result == {"text": reply_text}
    [result] = await tool_results(database, alice, sender)
    assert result.ok, result.error
    assert result.result == {
        "reply": reply_text,
        "status": "completed",
        "runId": str(sent.target_run_id),
        "sessionKey": "b",
    }
    answer = (await run_row(database, alice, sender)).result
    assert answer is not None and f'"reply": {json.dumps(reply_text)}' in answer["text"]
    async with database.tenant(alice) as s:
        [reply] = list(await s.scalars(select(RunInboxItem)))
    assert (reply.kind, reply.delivery, reply.source_run_id) == (
        "reply",
        "tool",
        sent.target_run_id,
    )
    assert reply.tool_call_id == result.tool_call_id
    # it was consumed by the call, not injected as a message as well
    types = [t for t, _ in await run_events(database, alice, sender)]
    assert ev.MESSAGE_INJECTED not in types
    assert len(await sent_messages(database, alice)) == 1  # re-executed, posted once


async def test_a_reply_racing_the_parking_is_still_the_calls_result(
    worker: Worker, database: Database, alice: Principal
) -> None:
    """The target answers at once: the reply may reach the sender's inbox before it parks (the
    parking is refused and the call runs again) or after (it is woken); either way the call
    returns it and nothing is injected."""
    await session(database, alice, "b")
    for n in range(3):
        ask = tool_line("sessions_send", sessionKey="b", message=f"quick {n}", waitForReply=True)
        sender = await post(database, alice, ask, "a")
        await wait_status(database, alice, sender, {"completed"})
        [result] = await tool_results(database, alice, sender)
        assert result.ok and result.result["reply"] == f"You said: quick {n}", result
        types = [t for t, _ in await run_events(database, alice, sender)]
        assert ev.MESSAGE_INJECTED not in types
    assert len(await sent_messages(database, alice)) == 3


async def test_a_reply_after_the_timeout_is_injected_later(
    worker: Worker, database: Database, alice: Principal
) -> None:
    await session(database, alice, "b")
    ask = tool_line(
        "sessions_send",
        sessionKey="b",
        message="/sleep 2500\nlate",
        waitForReply=True,
        timeoutSeconds=1,
    )
    sender = await post(database, alice, f"{ask}\n{tool_line('nap', ms=4000)}", "a")

    await wait_status(database, alice, sender, {"completed"}, timeout=20)
    timed_out, napped = await tool_results(database, alice, sender)
    [sent] = await sent_messages(database, alice)
    assert timed_out.ok and timed_out.result == {
        "reply": None,
        "timedOut": True,
        "runId": str(sent.target_run_id),
        "sessionKey": "b",
    }
    assert napped.ok
    late = "You said: /sleep 2500\nlate"
    injected = [d for t, d in await run_events(database, alice, sender) if t == ev.MESSAGE_INJECTED]
    assert len(injected) == 1
    assert injected[0]["source"] == "agent" and injected[0]["text"] == late
    assert injected[0]["fromRunId"] == str(sent.target_run_id)
    message = [m for m in await transcript(database, alice, sender) if isinstance(m, UserMessage)]
    assert message[-1].text == late and message[-1].source is not None
    assert message[-1].source.kind == "agent"
    assert message[-1].source.run_id == str(sent.target_run_id)
    async with database.tenant(alice) as s:
        [reply] = list(await s.scalars(select(RunInboxItem)))
    assert reply.delivery == "injected"


def relay(keys: list[str], last: str) -> str:
    """A message that makes its reader send to keys[0] the message that makes its reader send to
    keys[1] ... and the last one reads `last`."""
    message = last
    for key in reversed(keys):
        message = tool_line("sessions_send", sessionKey=key, message=message)
    return message


async def test_two_agents_messaging_each_other_stop_at_the_cap(
    worker: Worker, database: Database, alice: Principal
) -> None:
    agent_id = await default_agent_id(database, alice)
    async with database.tenant(alice) as s:
        await s.execute(
            update(Agent).where(Agent.id == agent_id).values(settings={"maxExchanges": 3})
        )
    await session(database, alice, "a")
    await session(database, alice, "b")
    # a → b → a → b → (a: refused) → ... would go on for as long as the script does
    origin = await post(database, alice, relay(["b", "a", "b", "a", "b", "a"], "end"), "a")
    await wait_status(database, alice, origin, {"completed"})

    for _ in range(100):
        sent = await sent_messages(database, alice)
        last = None if len(sent) < 3 else await run_row(database, alice, sent[2].target_run_id)  # type: ignore[arg-type]
        if last is not None and last.status == "completed":
            break
        await asyncio.sleep(0.1)
    assert len(sent) == 3
    assert {m.origin_run_id for m in sent} == {origin}
    assert [m.sender_run_id for m in sent[1:]] == [m.target_run_id for m in sent[:2]]
    assert last is not None and last.status == "completed"
    [refused] = await tool_results(database, alice, last.id)
    assert not refused.ok and (refused.error or "").startswith("message cap reached: 3 messages")
    await asyncio.sleep(0.5)
    assert len(await sent_messages(database, alice)) == 3  # nothing more went out


async def test_the_cap_counts_per_origin_and_the_server_default_applies(
    database: Database, db_url: str, alice: Principal
) -> None:
    await set_policy(database, alice, allow=["group:sessions"])
    settings = worker_settings(db_url, agent_message_max_exchanges=1)
    async with running_worker(database, settings, "w1"):
        await session(database, alice, "a")
        await session(database, alice, "b")
        for _ in range(2):  # two user messages: two origins, one message each is allowed
            origin = await post(database, alice, relay(["b", "a"], "end"), "a")
            await wait_status(database, alice, origin, {"completed"})
        for _ in range(100):
            sent = await sent_messages(database, alice)
            targets = [await run_row(database, alice, m.target_run_id) for m in sent]  # type: ignore[arg-type]
            if len(sent) == 2 and all(t.status == "completed" for t in targets):
                break
            await asyncio.sleep(0.1)
    assert len(sent) == 2 and sent[0].origin_run_id != sent[1].origin_run_id
    for m in sent:
        [refused] = await tool_results(database, alice, m.target_run_id)  # type: ignore[arg-type]
        assert not refused.ok and "maxExchanges 1" in (refused.error or "")


async def test_another_users_session_cannot_be_messaged(
    worker: Worker, database: Database, alice: Principal
) -> None:
    bob = Principal(user_id="bob", tenant_id=alice.tenant_id)
    await session(database, bob, "bobs")
    sender = await post(
        database, alice, tool_line("sessions_send", sessionKey="bobs", message="hi bob"), "a"
    )
    await wait_status(database, alice, sender, {"completed"})
    [refused] = await tool_results(database, alice, sender)
    assert not refused.ok and refused.error == "no such session: bobs"
    assert await sent_messages(database, alice) == []

    await set_policy(database, alice, allow=["group:sessions"], session_scope="tenant")
    sender = await post(
        database, alice, tool_line("sessions_send", sessionKey="bobs", message="hi bob"), "a"
    )
    await wait_status(database, alice, sender, {"completed"})
    [result] = await tool_results(database, alice, sender)
    assert result.ok, result.error
    target = UUID(result.result["runId"])
    await wait_status(database, alice, target, {"completed"})
    # the run is in bob's session (its lane, its agent) on behalf of alice, who caused it
    target_run = await run_row(database, alice, target)
    assert target_run.user_id == "alice"
    assert (await transcript(database, alice, target))[0].text == "hi bob"
