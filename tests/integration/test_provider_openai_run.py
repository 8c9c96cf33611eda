"""A whole run through `execute_run` with an `openai:` agent, against a fake OpenAI server.

The real openai SDK talks to a local server speaking Chat Completions; the run is enqueued,
claimed and executed exactly as the worker does (helpers from `test_loop.py`). The scripted
first turn fails with a 503, then breaks after partial output, then succeeds with reasoning,
text and two tool calls streamed in fragments; the second turn answers. What was stored must show
the retries and the reset as events, and hold exactly one assistant message per turn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.auth.principal import Principal
from app.config import Settings
from app.core import events as ev
from app.core.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage
from app.db.engine import Database
from app.queue.manager import RunQueue
from app.runtime.loop import execute_run
from tests.fakes import openai_wire as o
from tests.fakes.server import FakeServer
from tests.integration.test_loop import events, executions, run_row, start, transcript

MODEL = "openai:test-model"


@pytest.fixture
def queue(database: Database) -> RunQueue:
    return RunQueue(database)


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    fake = FakeServer()
    await fake.start()
    yield fake
    await fake.close()


def settings(server: FakeServer) -> Settings:
    return Settings(
        _env_file=None,
        lease_seconds=30,
        openai_api_key="sk-test-0123456789",
        openai_base_url=f"{server.url}/v1",
        model_max_retries=3,
        model_retry_initial_delay_seconds=0.01,
        model_retry_max_delay_seconds=0.05,
    )


def collapsed(evs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Event types with runs of the same delta type collapsed into `<type>*`."""
    out: list[str] = []
    for t, _ in evs:
        name = f"{t}*" if t in (ev.ASSISTANT_DELTA, ev.THINKING_DELTA) else t
        if not (out and out[-1] == name and name.endswith("*")):
            out.append(name)
    return out


async def test_openai_run_with_retries_reset_thinking_and_tools(
    queue: RunQueue, alice: Principal, server: FakeServer
) -> None:
    server.script(
        o.error(503, "Service temporarily overloaded", type_="server_error"),
        o.stream(o.reasoning("Two files"), o.content("I'll wri"), cut=True),
        o.stream(
            o.reasoning("Two files, "),
            o.reasoning("one call each."),
            o.content("Writing "),
            o.content("both."),
            o.tool_call(0, id="call_a", name="write_file", args='{"path": "a.txt", '),
            o.tool_call(
                1, id="call_b", name="write_file", args='{"path": "b.txt", "content": "B"}'
            ),
            o.tool_call(0, args='"content": "A"}'),
            o.finish("tool_calls"),
            o.usage(40, 20),
        ),
        o.answer("Wrote ", "both files.", tokens=(90, 4)),
    )
    leased = await start(queue, alice, "write a.txt and b.txt", agent={"model": MODEL})
    await execute_run(leased, settings=settings(server))

    run = await run_row(leased)
    assert run.status == "completed" and run.result == {"text": "Wrote both files."}

    evs = await events(leased)
    assert collapsed(evs) == [
        ev.RUN_QUEUED,
        ev.RUN_STARTED,
        ev.MODEL_RETRY,
        "thinking.delta*",
        "assistant.delta*",
        ev.ASSISTANT_RESET,
        ev.MODEL_RETRY,
        "thinking.delta*",
        "assistant.delta*",
        ev.ASSISTANT_MESSAGE,
        ev.USAGE,
        ev.TOOL_STARTED,
        ev.TOOL_COMPLETED,
        ev.TOOL_STARTED,
        ev.TOOL_COMPLETED,
        "assistant.delta*",
        ev.ASSISTANT_MESSAGE,
        ev.USAGE,
        ev.RUN_COMPLETED,
    ]
    retries = [d for t, d in evs if t == ev.MODEL_RETRY]
    assert [r["attempt"] for r in retries] == [1, 2]
    assert "503" in retries[0]["reason"] and "overloaded" in retries[0]["reason"]
    assert all(0 < r["delaySeconds"] <= 0.05 for r in retries)
    thinking = [d["text"] for t, d in evs if t == ev.THINKING_DELTA]
    assert thinking == ["Two files", "Two files, ", "one call each."]
    assert [d for t, d in evs if t == ev.ASSISTANT_RESET] == [{}]

    calls = [
        ToolCall(id="call_a", name="write_file", args={"path": "a.txt", "content": "A"}),
        ToolCall(id="call_b", name="write_file", args={"path": "b.txt", "content": "B"}),
    ]
    stored = await transcript(leased)
    assert [m.kind for m in stored] == [
        "user",
        "assistant",
        "tool_result",
        "tool_result",
        "assistant",
    ]
    assert stored[0] == UserMessage(text="write a.txt and b.txt")
    assert stored[1] == AssistantMessage(text="Writing both.", tool_calls=calls)
    assert stored[4] == AssistantMessage(text="Wrote both files.")
    results = [m for m in stored if isinstance(m, ToolResult)]
    assert [(r.tool_call_id, r.ok) for r in results] == [("call_a", True), ("call_b", True)]
    assert {k: e.status for k, e in (await executions(leased)).items()} == {
        "call_a": "completed",
        "call_b": "completed",
    }
    assert (run.input_tokens, run.output_tokens) == (130, 24)

    # four requests: 503, the cut stream, the first turn, the second turn with the tool results
    assert len(server.requests) == 4
    sent = server.requests[3].json()["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    assert [m.get("tool_call_id") for m in sent[2:]] == ["call_a", "call_b"]
    assert sent[1]["content"] == "Writing both."
    assert [c["id"] for c in sent[1]["tool_calls"]] == ["call_a", "call_b"]
