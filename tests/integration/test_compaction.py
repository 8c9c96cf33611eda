"""Context management against the real Postgres, driven by the offline model with small windows.

Runs are enqueued, claimed and executed exactly as the worker does (`execute_run`); a wrapper
around the offline model records every request and can fail, block or reject calls by purpose.
What the model was sent is read off the recorded requests; what was stored, off the tables and
the run's events.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import func, select, update

from app.agents.store import default_agent
from app.auth.principal import Principal
from app.config import Settings
from app.core import events as ev
from app.core.transcript import AssistantMessage, ToolResult, UserMessage
from app.db.engine import Database
from app.db.models import (
    Agent,
    AgentSession,
    ContextSnapshot,
    MemoryEntry,
    Run,
    RunEvent,
    SessionMessage,
    ToolExecution,
)
from app.llm.base import Model, ModelError, ModelEvent, ModelRequest, estimate_request_tokens
from app.llm.failures import CONTEXT_TOO_LONG
from app.llm.offline import OfflineModel
from app.llm.registry import ModelRegistry
from app.memory.tools import memory_tools
from app.queue.lease import LeasedRun
from app.queue.manager import RunQueue
from app.runtime.compaction import CONTEXT_OVERFLOW
from app.runtime.context import SUMMARY_HEADER
from app.runtime.loop import execute_run
from app.tools.base import Tool, ToolContext
from app.tools.registry import ToolRegistry
from app.tools.workspace_tools import workspace_tools
from tests.integration.policy_support import set_policy

SETTINGS = Settings(lease_seconds=30)
SUMMARY_START = SUMMARY_HEADER.split("(")[0]


class Scripted(Model):
    """The offline model, recording requests; fails, blocks or rejects calls on request."""

    name = "offline"

    def __init__(
        self,
        *,
        fail: frozenset[str] = frozenset(),
        block: str | None = None,
        reject_chat_over: int | None = None,
    ) -> None:
        self.inner = OfflineModel()
        self.requests: list[ModelRequest] = []
        self.fail = fail
        self.block = block
        self.blocked = asyncio.Event()
        self.release = asyncio.Event()
        self.reject_chat_over = reject_chat_over

    def of(self, purpose: str) -> list[ModelRequest]:
        return [r for r in self.requests if r.purpose == purpose]

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        if request.purpose in self.fail:
            raise ModelError("model_unavailable_transient", f"{request.purpose} is down")
        if request.purpose == self.block:
            self.blocked.set()
            await self.release.wait()
        limit = self.reject_chat_over
        if limit and request.purpose == "chat" and estimate_request_tokens(request) > limit:
            raise ModelError(CONTEXT_TOO_LONG, "the input is too long for this model")
        async for event in self.inner.stream(request):
            yield event


class Big(Tool):
    """Returns `size` characters (a large tool result)."""

    name = "big"
    description = "Return a large text."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "size": {"type": "integer"}},
        "additionalProperties": False,
    }
    idempotent = True

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        return f"result {args.get('n')}: " + "r" * int(args.get("size", 600))


@pytest.fixture
def queue(database: Database) -> RunQueue:
    return RunQueue(database)


async def configure(queue: RunQueue, who: Principal, **settings: Any) -> None:
    """Create the tenant's default agent with these agent settings (e.g. contextWindow)."""
    async with queue.db.tenant(who) as s:
        agent = await default_agent(s, who, model="offline", max_turns=8)
        await s.execute(
            update(Agent)
            .where(Agent.id == agent.id)
            .values(settings={**agent.settings, **settings})
        )


async def run(
    queue: RunQueue,
    who: Principal,
    message: str,
    model: Model,
    *,
    session: str = "s",
    tools: ToolRegistry | None = None,
    settings: Settings = SETTINGS,
) -> LeasedRun:
    """Enqueue, claim and execute one run to its end."""
    leased = await claim(queue, who, message, session)
    await execute_run(
        leased, settings=settings, models=registry(model), tools=tools or ToolRegistry()
    )
    return leased


async def claim(queue: RunQueue, who: Principal, message: str, session: str) -> LeasedRun:
    await queue.enqueue_run(who, message=message, session_key=session)
    claimed = await queue.claim_next("w1", 30)
    assert claimed is not None
    return LeasedRun(queue.db, claimed, "w1")


def registry(model: Model) -> ModelRegistry:
    models = ModelRegistry()
    models.register("offline", lambda _name: model)
    return models


async def events(leased: LeasedRun) -> list[tuple[str, dict[str, Any]]]:
    async with leased.db.tenant(leased.run.principal) as s:
        rows = (
            await s.execute(
                select(RunEvent.seq, RunEvent.type, RunEvent.data)
                .where(RunEvent.run_id == leased.run.id)
                .order_by(RunEvent.seq)
            )
        ).all()
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    return [(r.type, r.data) for r in rows]


def of_type(found: list[tuple[str, dict[str, Any]]], type_: str) -> list[dict[str, Any]]:
    return [data for t, data in found if t == type_]


async def row(leased: LeasedRun) -> Run:
    async with leased.db.tenant(leased.run.principal) as s:
        found = await s.get(Run, leased.run.id)
    assert found is not None
    return found


async def snapshots(db: Database, who: Principal) -> list[ContextSnapshot]:
    async with db.tenant(who) as s:
        return list(await s.scalars(select(ContextSnapshot).order_by(ContextSnapshot.created_at)))


def filler(label: str, chars: int = 1000) -> str:
    return f"{label} " + ("lorem ipsum " * (chars // 12))[: chars - len(label) - 1]


def summary_of(request: ModelRequest) -> str | None:
    first = request.messages[0] if request.messages else None
    if isinstance(first, UserMessage) and first.text.startswith(SUMMARY_START):
        return first.text
    return None


# ---------------------------------------------------------------------------- compaction


async def test_small_window_compacts_older_turns_and_keeps_every_row(
    queue: RunQueue, alice: Principal
) -> None:
    await configure(queue, alice, contextWindow=2048)  # budget 1536 (reserve capped at 512)
    model = Scripted()
    runs = [await run(queue, alice, filler(f"turn {i}"), model) for i in range(1, 5)]

    assert [r.status for r in [await row(x) for x in runs]] == ["completed"] * 4
    quiet = [await events(x) for x in runs[:3]]
    assert all(not of_type(e, ev.CONTEXT_COMPACTING) for e in quiet)
    found = await events(runs[3])
    compacting = of_type(found, ev.CONTEXT_COMPACTING)
    compacted = of_type(found, ev.CONTEXT_COMPACTED)
    assert len(compacting) == len(compacted) == 1
    assert compacting[0]["tokensBefore"] > compacting[0]["budget"] == 1536
    assert compacted[0]["fromSeq"] == 1 and compacted[0]["toSeq"] == 5
    assert compacted[0]["messages"] == 5 and compacted[0]["tokensAfter"] <= 1536
    types = [t for t, _ in found]
    assert types.index(ev.CONTEXT_COMPACTED) < types.index(ev.ASSISTANT_DELTA)

    (snapshot,) = await snapshots(queue.db, alice)
    assert (snapshot.first_message_seq, snapshot.last_message_seq) == (1, 5)
    assert snapshot.run_id == runs[3].run.id and snapshot.model == "offline"
    assert snapshot.tokens_before > 1536 >= snapshot.tokens_after > snapshot.summary_tokens > 0
    assert snapshot.summary.startswith("Summary of the earlier conversation:")
    assert "turn 1" in snapshot.summary and "turn 3" in snapshot.summary

    # what the model was sent: the summary, then the rows after it, verbatim
    summary_requests = model.of("compact")  # in pieces that each fit the budget
    assert summary_requests and "turn 1 lorem" in summary_requests[0].messages[0].text
    assert all(r.tools == () and estimate_request_tokens(r) <= 1536 for r in summary_requests)
    chat = model.of("chat")[-1]
    assert summary_of(chat) is not None and "turn 1" in (summary_of(chat) or "")
    assert [type(m).__name__ for m in chat.messages[1:]] == ["AssistantMessage", "UserMessage"]
    assert chat.messages[-1] == UserMessage(text=filler("turn 4"))
    assert "turn 4" in (await row(runs[3])).result["text"]  # type: ignore[index]

    # the transcript keeps every row, each with its token count; the session sums them
    async with queue.db.tenant(alice) as s:
        counts = list(await s.scalars(select(SessionMessage.token_count)))
        session = await s.scalar(select(AgentSession))
    assert len(counts) == 8 and all(c and c > 0 for c in counts)
    assert session is not None and session.token_count == sum(counts)
    assert session.compactions == 1 and session.context_tokens is not None
    status = await row(runs[3])
    assert status.compactions == 1 and status.context_window == 2048
    assert status.context_tokens is not None and status.context_tokens <= 1536

    # the next run starts from the stored summary without compacting again
    fifth = await run(queue, alice, filler("turn 5"), model)
    assert (await row(fifth)).status == "completed"
    assert not of_type(await events(fifth), ev.CONTEXT_COMPACTING)
    assert summary_of(model.of("chat")[-1]) == summary_of(chat)
    assert len(model.of("compact")) == len(summary_requests)


async def test_a_tool_call_and_its_results_are_never_split(
    queue: RunQueue, alice: Principal
) -> None:
    await configure(queue, alice, contextWindow=3072)
    model = Scripted()
    tools = ToolRegistry([Big()])
    for i in range(14):
        line = f'/tool big {{"n": {i}, "size": 500}}'
        leased = await run(
            queue, alice, f"{line}\n{line.replace('500', '300')}", model, tools=tools
        )
        assert (await row(leased)).status == "completed"
    assert len(await snapshots(queue.db, alice)) >= 2  # compacted more than once

    for request in model.of("chat"):
        messages = list(request.messages)
        open_ids: set[str] = set()
        for position, message in enumerate(messages):
            if isinstance(message, ToolResult):
                assert message.tool_call_id in open_ids, (position, messages[:position])
            elif isinstance(message, AssistantMessage):
                open_ids = {c.id for c in message.tool_calls}
            else:
                open_ids = set()
        if summary_of(request) is not None:
            assert not isinstance(messages[1], ToolResult)


async def test_long_tool_results_are_trimmed_only_in_what_the_model_sees(
    queue: RunQueue, alice: Principal
) -> None:
    model = Scripted()
    tools = ToolRegistry(workspace_tools())
    settings = Settings(lease_seconds=30, context_tool_result_max_chars=2000)
    content = "HEAD" + "x" * 30_000 + "TAIL"
    write = "/tool write_file " + json.dumps({"path": "big.txt", "content": content})
    await run(queue, alice, write, model, tools=tools, settings=settings)
    read = await run(
        queue, alice, '/tool read_file {"path": "big.txt"}', model, tools=tools, settings=settings
    )
    assert (await row(read)).status == "completed"

    sent = model.of("chat")[-1].messages[-1]
    assert isinstance(sent, ToolResult) and sent.name == "read_file"
    text = json.dumps(sent.result)
    assert "HEAD" in text and "TAIL" in text and "full result is stored" in text
    assert len(text) < 2300
    async with queue.db.tenant(alice) as s:
        stored = await s.scalar(
            select(SessionMessage.payload).where(
                SessionMessage.run_id == read.run.id, SessionMessage.role == "tool"
            )
        )
    assert stored is not None and content in json.dumps(stored)


# ---------------------------------------------------------------------------- failures


async def test_failed_compaction_goes_on_while_it_fits_then_fails_clearly(
    queue: RunQueue, alice: Principal
) -> None:
    await configure(queue, alice, contextWindow=2048)
    broken = Scripted(fail=frozenset({"compact"}))
    for i in range(1, 4):
        await run(queue, alice, filler(f"turn {i}"), broken)

    # over the budget but within the window: the run completes uncompacted, said so once
    fourth = await run(queue, alice, filler("turn 4"), broken)
    found = await events(fourth)
    assert (await row(fourth)).status == "completed"
    (failure,) = of_type(found, ev.CONTEXT_COMPACTION_FAILED)
    assert failure["error"]["code"] == "model_unavailable_transient"
    assert not of_type(found, ev.CONTEXT_COMPACTED)
    assert await snapshots(queue.db, alice) == []

    # over the window: the run fails with context_overflow, naming the compaction's failure
    fifth = await run(queue, alice, filler("turn 5"), broken)
    failed = await row(fifth)
    assert failed.status == "failed" and failed.error is not None
    assert failed.error["code"] == CONTEXT_OVERFLOW
    assert "compacting older messages failed: compact is down" in failed.error["message"]
    assert await snapshots(queue.db, alice) == []  # nothing half-written

    # the lane is free and the session usable: the next run compacts and completes
    sixth = await run(queue, alice, filler("turn 6"), Scripted())
    assert (await row(sixth)).status == "completed"
    (snapshot,) = await snapshots(queue.db, alice)
    assert snapshot.run_id == sixth.run.id
    async with queue.db.tenant(alice) as s:
        rows = await s.scalar(select(func.count()).select_from(SessionMessage))
    assert rows == 6 * 2 - 1  # the failed run stored its question, not an answer


async def test_still_too_large_after_compaction_fails_without_looping(
    queue: RunQueue, alice: Principal
) -> None:
    await configure(queue, alice, contextWindow=2048)
    model = Scripted()
    for i in range(1, 3):
        await run(queue, alice, filler(f"turn {i}"), model)
    huge = await run(queue, alice, filler("huge", 8000), model)
    failed = await row(huge)
    assert failed.status == "failed" and failed.error is not None
    assert failed.error["code"] == CONTEXT_OVERFLOW
    assert "even after compacting older messages" in failed.error["message"]
    assert len(of_type(await events(huge), ev.CONTEXT_COMPACTED)) == 1  # then a clear failure
    summaries = len(model.of("compact"))
    assert not [r for r in model.of("chat") if "huge" in json.dumps([str(m) for m in r.messages])]

    # a first message over the whole window has nothing to compact
    alone = await run(queue, alice, filler("alone", 10_000), model, session="other")
    failed = await row(alone)
    assert failed.error is not None and failed.error["code"] == CONTEXT_OVERFLOW
    assert "no older messages left to compact" in failed.error["message"]
    assert len(model.of("compact")) == summaries


async def test_provider_rejecting_the_context_gets_one_forced_compaction(
    queue: RunQueue, alice: Principal
) -> None:
    await configure(queue, alice, contextWindow=8192)  # our estimate says everything fits
    model = Scripted(reject_chat_over=1500)
    for i in range(1, 4):
        await run(queue, alice, filler(f"turn {i}"), model)
    fourth = await run(queue, alice, filler("turn 4"), model)
    assert (await row(fourth)).status == "completed"
    assert len(of_type(await events(fourth), ev.CONTEXT_COMPACTED)) == 1
    assert summary_of(model.of("chat")[-1]) is not None

    # when compacting cannot help, the provider's own error fails the run
    alone = await run(queue, alice, filler("alone", 7000), model, session="other")
    failed = await row(alone)
    assert failed.error is not None and failed.error["code"] == CONTEXT_TOO_LONG


async def test_one_sessions_compaction_never_holds_up_another(
    queue: RunQueue, alice: Principal
) -> None:
    await configure(queue, alice, contextWindow=2048)
    model = Scripted(block="compact")
    for i in range(1, 4):
        await run(queue, alice, filler(f"turn {i}"), model, session="slow")
    slow = await claim(queue, alice, filler("turn 4"), "slow")
    task = asyncio.create_task(
        execute_run(slow, settings=SETTINGS, models=registry(model), tools=ToolRegistry())
    )
    await asyncio.wait_for(model.blocked.wait(), 10)

    fast = await asyncio.wait_for(run(queue, alice, "hello", model, session="fast"), 10)
    assert (await row(fast)).status == "completed"
    assert not task.done() and (await row(slow)).status == "running"

    model.release.set()
    await asyncio.wait_for(task, 10)
    assert (await row(slow)).status == "completed"


# ---------------------------------------------------------------------------- memory flush


async def test_memory_flush_before_compaction_happens_once_per_stretch(
    queue: RunQueue, alice: Principal
) -> None:
    await configure(queue, alice, contextWindow=6144)
    tools = ToolRegistry(memory_tools())
    model = Scripted(fail=frozenset({"compact"}))
    first = filler("turn 1", 2000) + "\n/remember the deploy key lives in vault"
    await run(queue, alice, first, model, tools=tools)
    for i in range(2, 9):
        leased = await run(queue, alice, filler(f"turn {i}", 2000), model, tools=tools)
        if of_type(await events(leased), ev.CONTEXT_COMPACTION_FAILED):
            break
    else:
        raise AssertionError("no compaction was attempted")

    found = await events(leased)
    (flushed,) = of_type(found, ev.MEMORY_FLUSHED)
    assert flushed["stored"] == 1 and flushed["failed"] == 0 and flushed["throughSeq"] > 1
    started = [d for d in of_type(found, ev.TOOL_STARTED) if d.get("purpose") == "memory_flush"]
    completed = of_type(found, ev.TOOL_COMPLETED)
    assert [d["name"] for d in started] == ["memory_store"]
    assert completed[-1]["purpose"] == "memory_flush"
    assert completed[-1]["executionId"] == started[0]["executionId"]
    async with queue.db.tenant(alice) as s:
        memories = list(await s.scalars(select(MemoryEntry.content)))
        execution = await s.scalar(
            select(ToolExecution).where(ToolExecution.name == "memory_store")
        )
        tool_rows = await s.scalar(
            select(func.count()).select_from(SessionMessage).where(SessionMessage.role == "tool")
        )
    assert memories == ["the deploy key lives in vault"]
    assert execution is not None and execution.status == "completed"
    assert tool_rows == 0  # housekeeping, not conversation

    # the compaction failed after the flush; the next one offers only the rows added since
    working = Scripted()
    retry = await run(queue, alice, filler("retry", 500), working, tools=tools)
    found = await events(retry)
    assert of_type(found, ev.CONTEXT_COMPACTED)
    (again,) = of_type(found, ev.MEMORY_FLUSHED)
    assert again["throughSeq"] > flushed["throughSeq"] and again["stored"] == 0
    (offered,) = working.of("flush")
    text = offered.messages[0].text  # type: ignore[union-attr]
    assert "turn 1 " not in text and "deploy key" not in text
    assert "user: turn " in text  # rows added since the first flush
    async with queue.db.tenant(alice) as s:
        assert await s.scalar(select(func.count()).select_from(MemoryEntry)) == 1


async def test_no_flush_when_the_policy_withholds_memory_store(
    queue: RunQueue, alice: Principal
) -> None:
    await configure(queue, alice, contextWindow=2048)
    model = Scripted()
    for i in range(1, 5):
        text = filler(f"turn {i}") + ("\n/remember something" if i == 1 else "")
        leased = await run(queue, alice, text, model)  # no memory tools offered
    found = await events(leased)
    assert of_type(found, ev.CONTEXT_COMPACTED) and not of_type(found, ev.MEMORY_FLUSHED)
    assert model.of("flush") == []


async def test_flush_under_an_argument_rule_stores_only_what_the_rule_lets_through(
    queue: RunQueue, alice: Principal
) -> None:
    await configure(queue, alice, contextWindow=6144)
    allowlist = {"tool": "memory_store", "arg": "content", "allowRegex": ["keep: .*"]}
    await set_policy(queue.db, alice, approval={"args": [allowlist]})
    tools = ToolRegistry(memory_tools())
    model = Scripted()
    notes = "\n/remember keep: tea, no sugar\n/remember the password is hunter2"
    await run(queue, alice, filler("turn 1", 2000) + notes, model, tools=tools)
    for i in range(2, 9):
        leased = await run(queue, alice, filler(f"turn {i}", 2000), model, tools=tools)
        if of_type(await events(leased), ev.MEMORY_FLUSHED):
            break
    else:
        raise AssertionError("no memory flush happened")

    found = await events(leased)
    (flushed,) = of_type(found, ev.MEMORY_FLUSHED)
    assert (flushed["stored"], flushed["failed"]) == (1, 1)
    (refused,) = [d for d in of_type(found, ev.TOOL_FAILED) if d.get("purpose") == "memory_flush"]
    assert "approval" in refused["error"]
    assert of_type(found, ev.CONTEXT_COMPACTED)
    async with queue.db.tenant(alice) as s:
        assert list(await s.scalars(select(MemoryEntry.content))) == ["keep: tea, no sugar"]
