"""The agent loop against the real Postgres, driven by the offline model.

Runs are enqueued and claimed through `RunQueue` and executed by `execute_run` exactly as the
worker does (`run.started` is stored by the claim in `start`). Each test then reads
back what was stored: transcript, events (types, order, contiguous seqs), tool executions, usage.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy import select, text, update

from app.auth.principal import Principal
from app.config import Settings
from app.core import events as ev
from app.core.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage, load_message
from app.db.engine import Database
from app.db.models import Agent, Run, RunEvent, SessionMessage, ToolExecution
from app.llm.base import Message, Model, ModelEvent, ModelRequest
from app.llm.registry import ModelRegistry
from app.queue.lease import LeasedRun
from app.queue.manager import RunQueue
from app.runtime.context import MISSING_RESULT, build_context
from app.runtime.loop import execute_run
from app.runtime.model_turn import unique_tool_call_ids
from app.runtime.run_state import Entry
from app.runtime.tool_execution import INTERRUPTED
from app.runtime.tool_records import tool_finished, tool_started
from app.runtime.transcript_store import append_messages
from app.tools.base import Tool, ToolContext
from app.tools.registry import ToolRegistry
from app.tools.workspace_tools import workspace_tools

SETTINGS = Settings(lease_seconds=30)


class Counter(Tool):
    """Counts its executions (the side effect a re-run would duplicate)."""

    name = "count"
    description = "Count an execution."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"label": {"type": "string"}},
        "additionalProperties": False,
    }

    def __init__(self, *, idempotent: bool = False) -> None:
        self.idempotent = idempotent
        self.labels: list[str] = []

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        self.labels.append(args.get("label", ""))
        return {"count": len(self.labels)}


class Exploding(Model):
    """A model that must not be called."""

    name = "offline"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        raise AssertionError("the model was called")
        yield  # pragma: no cover  (makes this an async generator)


@pytest.fixture
def queue(database: Database) -> RunQueue:
    return RunQueue(database)


async def start(
    queue: RunQueue,
    who: Principal,
    message: str,
    *,
    session_key: str = "s",
    worker: str = "w1",
    agent: dict[str, Any] | None = None,
) -> LeasedRun:
    """Enqueue and claim a run (the claim stores its start event)."""
    await queue.enqueue_run(who, message=message, session_key=session_key)
    if agent:
        async with queue.db.tenant(who) as s:
            await s.execute(update(Agent).values(**agent))
    claimed = await queue.claim_next(worker, 30)
    assert claimed is not None
    return LeasedRun(queue.db, claimed, worker)  # the claim stored run.started


async def crash_and_resume(queue: RunQueue, dead: LeasedRun, worker: str = "w2") -> LeasedRun:
    """Expire the dead worker's lease, recover the run and claim it again (attempt + 1)."""
    async with queue.db.owner() as s:
        await s.execute(
            text(
                "UPDATE agent_run_queue SET lease_expires_at = now() - interval '1 s' WHERE id = :id"
            ),
            {"id": dead.run.id},
        )
    assert await queue.recover_expired() == [dead.run.id]
    claimed = await queue.claim_next(worker, 30)
    assert claimed is not None and claimed.id == dead.run.id
    assert claimed.attempt == dead.run.attempt + 1
    leased = LeasedRun(queue.db, claimed, worker)
    await leased.emit(ev.RunResumedEvent(attempt=claimed.attempt, worker_id=worker))
    return leased


async def events(
    leased: LeasedRun, *, with_states: bool = False
) -> list[tuple[str, dict[str, Any]]]:
    """The run's events in order, after checking that seqs run 1, 2, 3, … without gaps
    (`state.changed` left out unless `with_states`: see `test_state_changes_of_a_tool_run`)."""
    async with leased.db.tenant(leased.run.principal) as s:
        rows = list(
            await s.scalars(
                select(RunEvent).where(RunEvent.run_id == leased.run.id).order_by(RunEvent.seq)
            )
        )
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    return [(r.type, r.data) for r in rows if with_states or r.type != ev.STATE_CHANGED]


def types(evs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Event types with runs of `assistant.delta` collapsed into one `assistant.delta*`."""
    out: list[str] = []
    for t, _ in evs:
        name = "assistant.delta*" if t == ev.ASSISTANT_DELTA else t
        if not (out and out[-1] == name == "assistant.delta*"):
            out.append(name)
    return out


async def run_row(leased: LeasedRun) -> Run:
    async with leased.db.tenant(leased.run.principal) as s:
        run = await s.get(Run, leased.run.id)
    assert run is not None
    return run


async def transcript(leased: LeasedRun, *, run_only: bool = True) -> list[Message]:
    async with leased.db.tenant(leased.run.principal) as s:
        query = select(SessionMessage).where(SessionMessage.session_id == leased.run.session_id)
        if run_only:
            query = query.where(SessionMessage.run_id == leased.run.id)
        rows = await s.scalars(query.order_by(SessionMessage.seq))
        return [load_message(r.payload) for r in rows]


async def executions(leased: LeasedRun) -> dict[str, ToolExecution]:
    async with leased.db.tenant(leased.run.principal) as s:
        rows = await s.scalars(select(ToolExecution).where(ToolExecution.run_id == leased.run.id))
        return {r.tool_call_id: r for r in rows}


def tool_line(name: str, **args: Any) -> str:
    return f"/tool {name} {json.dumps(args)}"


# ---------------------------------------------------------------------------- plain runs


async def test_echo_run(queue: RunQueue, alice: Principal) -> None:
    leased = await start(queue, alice, "hello, loop")
    await execute_run(leased, settings=SETTINGS)

    evs = await events(leased)
    assert types(evs) == [
        ev.RUN_QUEUED,
        ev.RUN_STARTED,
        "assistant.delta*",
        ev.ASSISTANT_MESSAGE,
        ev.USAGE,
        ev.RUN_COMPLETED,
    ]
    deltas = [d["text"] for t, d in evs if t == ev.ASSISTANT_DELTA]
    assert len(deltas) >= 2
    answer = "".join(deltas)
    assert "hello, loop" in answer
    assert dict(evs)[ev.ASSISTANT_MESSAGE] == {"text": answer, "toolCalls": []}
    assert dict(evs)[ev.RUN_COMPLETED] == {"result": {"text": answer}}
    usage = dict(evs)[ev.USAGE]
    assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0

    assert await transcript(leased) == [
        UserMessage(text="hello, loop"),
        AssistantMessage(text=answer),
    ]
    run = await run_row(leased)
    assert run.status == "completed" and run.result == {"text": answer}
    assert (run.input_tokens, run.output_tokens) == (usage["inputTokens"], usage["outputTokens"])
    assert run.state is None


async def test_workspace_persists_across_runs_of_a_session(
    queue: RunQueue, alice: Principal
) -> None:
    first = await start(
        queue, alice, "save this\n" + tool_line("write_file", path="notes/a.txt", content="hi 1")
    )
    await execute_run(first, settings=SETTINGS)
    evs = await events(first)
    assert types(evs) == [
        ev.RUN_QUEUED,
        ev.RUN_STARTED,
        ev.ASSISTANT_MESSAGE,
        ev.USAGE,
        ev.TOOL_STARTED,
        ev.TOOL_COMPLETED,
        "assistant.delta*",
        ev.ASSISTANT_MESSAGE,
        ev.USAGE,
        ev.RUN_COMPLETED,
    ]
    [call] = evs[2][1]["toolCalls"]  # the first assistant.message
    assert call["name"] == "write_file"
    assert call["args"] == {"path": "notes/a.txt", "content": "hi 1"}
    assert dict(evs)[ev.TOOL_COMPLETED]["toolCallId"] == call["id"]
    first_result = (await run_row(first)).result
    assert first_result is not None
    assert first_result["text"].startswith('write_file ok: {"path": "notes/a.txt"')
    [execution] = (await executions(first)).values()
    assert (execution.status, execution.attempt, execution.name) == ("completed", 1, "write_file")

    second = await start(queue, alice, tool_line("read_file", path="notes/a.txt"), worker="w2")
    await execute_run(second, settings=SETTINGS)
    completed = dict(await events(second))[ev.TOOL_COMPLETED]
    assert completed["result"]["content"] == "hi 1"
    result = (await run_row(second)).result
    assert result is not None and result["text"].startswith("read_file ok:")
    assert "hi 1" in result["text"]
    whole = await transcript(second, run_only=False)
    assert [m.kind for m in whole] == ["user", "assistant", "tool_result", "assistant"] * 2


async def test_state_changes_of_a_tool_run(queue: RunQueue, alice: Principal) -> None:
    leased = await start(queue, alice, tool_line("list_files"))
    await execute_run(leased, settings=SETTINGS)
    evs = await events(leased, with_states=True)
    changes = [(d["from"], d["to"]) for t, d in evs if t == ev.STATE_CHANGED]
    assert changes == [
        ("queued", "thinking"),
        ("thinking", "tool_calling"),
        ("tool_calling", "observing"),
        ("observing", "thinking"),
        ("thinking", "responding"),
        ("responding", "completed"),
    ]
    # each change is stored before what happens in the new state
    order = [t if t != ev.STATE_CHANGED else d["to"] for t, d in evs]
    assert order.index("tool_calling") < order.index(ev.TOOL_STARTED)
    assert order.index("completed") == order.index(ev.RUN_COMPLETED) - 1
    assert (await run_row(leased)).state is None  # finishing clears it


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        (tool_line("write_file", path="../../etc/passwd", content="x"), "contains '..'"),
        (tool_line("read_file", path="/etc/passwd"), "is absolute"),
        ("/tool write_file {not json", "invalid arguments for write_file"),
        (tool_line("read_file", path=5), "path: 5 is not of type 'string'"),
        (tool_line("launch_missiles"), "unknown tool 'launch_missiles'"),
    ],
)
async def test_failing_tool_calls_are_fed_back(
    queue: RunQueue, alice: Principal, line: str, fragment: str
) -> None:
    leased = await start(queue, alice, line)
    await execute_run(leased, settings=SETTINGS)
    evs = await events(leased)
    assert ev.TOOL_FAILED in types(evs) and ev.TOOL_COMPLETED not in types(evs)
    assert fragment in dict(evs)[ev.TOOL_FAILED]["error"]
    run = await run_row(leased)
    assert run.status == "completed"
    assert run.result is not None and " failed: " in run.result["text"]
    [result] = [m for m in await transcript(leased) if isinstance(m, ToolResult)]
    assert not result.ok and fragment in (result.error or "")
    [execution] = (await executions(leased)).values()
    assert execution.status == "failed"


async def test_model_failure_fails_the_run(queue: RunQueue, alice: Principal) -> None:
    leased = await start(queue, alice, "please\n/fail")
    await execute_run(leased, settings=SETTINGS)
    run = await run_row(leased)
    assert run.status == "failed" and run.error is not None
    assert run.error["code"] == "model_error" and "/fail" in run.error["message"]
    assert types(await events(leased)) == [ev.RUN_QUEUED, ev.RUN_STARTED, ev.RUN_FAILED]
    assert await transcript(leased) == [UserMessage(text="please\n/fail")]


async def test_max_turns(queue: RunQueue, alice: Principal) -> None:
    leased = await start(queue, alice, "/tool list_files", agent={"max_turns": 1})
    await execute_run(leased, settings=SETTINGS)
    run = await run_row(leased)
    assert run.status == "failed" and run.error is not None
    assert run.error["code"] == "max_turns_exceeded" and "1 model turns" in run.error["message"]
    assert types(await events(leased))[-3:] == [ev.TOOL_STARTED, ev.TOOL_COMPLETED, ev.RUN_FAILED]


async def test_unknown_model_fails_fast(queue: RunQueue, alice: Principal) -> None:
    leased = await start(queue, alice, "hi", agent={"model": "gpt-nonexistent"})
    await asyncio.wait_for(execute_run(leased, settings=SETTINGS), 5)
    run = await run_row(leased)
    assert run.status == "failed" and run.error is not None
    assert run.error["code"] == "model_unavailable"
    assert "gpt-nonexistent" in run.error["message"] and "offline" in run.error["message"]
    assert await transcript(leased) == []


# ---------------------------------------------------------------------------- resumption

TWO_COUNTS = [
    ToolCall(id="call_a", name="count", args={"label": "a"}),
    ToolCall(id="call_b", name="count", args={"label": "b"}),
]


async def crashed_mid_tools(queue: RunQueue, who: Principal, *, b_started: bool) -> LeasedRun:
    """Attempt 1 stored the tool-call message and call_a's result, then its worker died."""
    message = "\n".join(tool_line("count", label=c.args["label"]) for c in TWO_COUNTS)
    dead = await start(queue, who, message, worker="dead")
    await append_messages(dead, [UserMessage(text=message)])
    await append_messages(
        dead,
        [AssistantMessage(tool_calls=TWO_COUNTS)],
        events=[ev.AssistantMessageEvent(text="", tool_calls=[])],
    )
    await tool_started(dead, TWO_COUNTS[0])
    await tool_finished(
        dead, ToolResult(tool_call_id="call_a", name="count", ok=True, result={"count": 1})
    )
    if b_started:
        await tool_started(dead, TWO_COUNTS[1])
    return await crash_and_resume(queue, dead)


def registry_with(counter: Counter) -> ToolRegistry:
    return ToolRegistry([*workspace_tools(), counter])


async def test_resume_runs_only_the_missing_call(queue: RunQueue, alice: Principal) -> None:
    alive = await crashed_mid_tools(queue, alice, b_started=False)
    counter = Counter()
    await execute_run(alive, settings=SETTINGS, tools=registry_with(counter))

    assert counter.labels == ["b"]  # call_a's result was stored: never executed again
    runs = await executions(alive)
    assert {k: (v.status, v.attempt) for k, v in runs.items()} == {
        "call_a": ("completed", 1),
        "call_b": ("completed", 1),
    }
    stored = await transcript(alive)
    assert [m.kind for m in stored] == [
        "user",
        "assistant",
        "tool_result",
        "tool_result",
        "assistant",
    ]
    run = await run_row(alive)
    assert run.status == "completed" and run.attempts == 2
    assert run.result == {"text": 'count ok: {"count": 1}\ncount ok: {"count": 1}'}
    assert types(await events(alive))[-7:] == [
        ev.RUN_RESUMED,
        ev.TOOL_STARTED,
        ev.TOOL_COMPLETED,
        "assistant.delta*",
        ev.ASSISTANT_MESSAGE,
        ev.USAGE,
        ev.RUN_COMPLETED,
    ]


@pytest.mark.parametrize("idempotent", [False, True])
async def test_interrupted_call_reruns_only_if_idempotent(
    queue: RunQueue, alice: Principal, idempotent: bool
) -> None:
    alive = await crashed_mid_tools(queue, alice, b_started=True)
    counter = Counter(idempotent=idempotent)
    await execute_run(alive, settings=SETTINGS, tools=registry_with(counter))

    b = (await executions(alive))["call_b"]
    results = {m.tool_call_id: m for m in await transcript(alive) if isinstance(m, ToolResult)}
    if idempotent:
        assert counter.labels == ["b"]
        assert (b.status, b.attempt) == ("completed", 2)
        assert results["call_b"].ok
    else:
        assert counter.labels == []
        assert (b.status, b.attempt) == ("interrupted", 2)
        assert not results["call_b"].ok and results["call_b"].error == INTERRUPTED
        failed = dict(await events(alive))[ev.TOOL_FAILED]
        assert failed == {
            "toolCallId": "call_b",
            "name": "count",
            "error": INTERRUPTED,
            "executionId": str(b.id),
        }
    run = await run_row(alive)
    assert run.status == "completed" and run.result is not None
    assert (
        run.result["text"]
        .splitlines()[1]
        .startswith("count ok:" if idempotent else "count failed: interrupted by a worker failure")
    )


async def test_resume_after_stored_answer_only_finishes(queue: RunQueue, alice: Principal) -> None:
    dead = await start(queue, alice, "question", worker="dead")
    await append_messages(dead, [UserMessage(text="question"), AssistantMessage(text="the answer")])
    alive = await crash_and_resume(queue, dead)
    models = ModelRegistry()
    models.register("offline", lambda _name: Exploding())
    await execute_run(alive, settings=SETTINGS, models=models)
    run = await run_row(alive)
    assert run.status == "completed" and run.result == {"text": "the answer"}
    assert types(await events(alive))[-2:] == [ev.RUN_RESUMED, ev.RUN_COMPLETED]


async def test_resume_before_the_model_answered(queue: RunQueue, alice: Principal) -> None:
    dead = await start(queue, alice, "again?", worker="dead")
    await append_messages(dead, [UserMessage(text="again?")])
    alive = await crash_and_resume(queue, dead)
    await execute_run(alive, settings=SETTINGS)
    stored = await transcript(alive)
    assert [m.kind for m in stored] == ["user", "assistant"]  # the user message only once
    assert (await run_row(alive)).status == "completed"


# ---------------------------------------------------------------------------- cancellation


async def test_cancelling_the_task_interrupts_promptly(queue: RunQueue, alice: Principal) -> None:
    leased = await start(queue, alice, "/sleep 5000")
    task = asyncio.create_task(execute_run(leased, settings=SETTINGS))
    deadline = time.monotonic() + 5
    while (await run_row(leased)).state != "thinking":
        assert time.monotonic() < deadline and not task.done()
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.05)
    begin = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - begin < 1.0
    run = await run_row(leased)
    assert run.status == "running"  # the worker, not the loop, finishes a cancelled run
    await leased.finish("cancelled", error={"code": "cancelled", "message": "cancelled"})
    assert types(await events(leased)) == [ev.RUN_QUEUED, ev.RUN_STARTED, ev.RUN_CANCELLED]


async def test_cancel_at_any_step_propagates_and_leaves_the_lease_usable(
    queue: RunQueue, alice: Principal
) -> None:
    """Cancel at staggered moments (mid-transaction included): always a prompt CancelledError."""
    message = "\n".join(tool_line("write_file", path=f"f{i}", content="x" * i) for i in range(4))
    # spread the cancels over a whole run as long as it takes on this machine now (a fixed
    # stagger all landed in one phase on a loaded machine)
    durations = []
    for attempt in range(2):  # the first run is the cold one
        timed = await start(queue, alice, message, session_key=f"cancel-timing-{attempt}")
        begin = time.monotonic()
        await execute_run(timed, settings=SETTINGS)
        durations.append(time.monotonic() - begin)
    whole = min(durations)
    reached: list[int] = []  # events stored before each cancel landed
    for i in range(12):
        leased = await start(queue, alice, message, session_key=f"cancel-{i}")
        task = asyncio.create_task(execute_run(leased, settings=SETTINGS))
        await asyncio.sleep(whole * i / 11)
        task.cancel()
        begin = time.monotonic()
        try:
            await task
        except asyncio.CancelledError:
            assert time.monotonic() - begin < 1.0
            if (await run_row(leased)).status == "running":
                await leased.finish("cancelled", error={"code": "cancelled", "message": "x"})
                assert (await run_row(leased)).status == "cancelled"
            else:  # landed after the run's own finish had committed: nothing left to cancel
                assert (await run_row(leased)).status == "completed"
        else:  # finished before the cancel landed
            assert (await run_row(leased)).status == "completed"
        reached.append(len(await events(leased)))  # seqs still contiguous
    assert len(set(reached)) >= 3, (reached, durations)  # the cancels landed in different phases


# ---------------------------------------------------------------------------- pure helpers


def test_reused_or_missing_tool_call_ids_are_made_unique() -> None:
    calls = [
        ToolCall(id="call_0", name="a"),
        ToolCall(id="call_0", name="b"),
        ToolCall(id="", name="c"),
        ToolCall(id="fresh", name="d"),
    ]
    fixed = unique_tool_call_ids(calls, used={"call_0"})
    ids = [c.id for c in fixed]
    assert len(set(ids)) == 4 and "call_0" not in ids and all(ids)
    assert ids[3] == "fresh" and [c.name for c in fixed] == ["a", "b", "c", "d"]


def test_context_repairs_calls_left_without_results() -> None:
    old_run, this_run = uuid4(), uuid4()
    dangling = ToolCall(id="x", name="write_file")
    answered = ToolCall(id="y", name="read_file")
    transcript = [
        Entry(old_run, UserMessage(text="one")),
        Entry(old_run, AssistantMessage(tool_calls=[dangling, answered])),
        Entry(old_run, ToolResult(tool_call_id="y", name="read_file", ok=True, result=1)),
        Entry(this_run, UserMessage(text="two")),
    ]
    context = build_context(transcript)
    assert [m.kind for m in context] == ["user", "assistant", "tool_result", "tool_result", "user"]
    repaired = context[3]
    assert isinstance(repaired, ToolResult)
    assert (repaired.tool_call_id, repaired.ok, repaired.error) == ("x", False, MISSING_RESULT)
    assert build_context(transcript[:1]) == [UserMessage(text="one")]
