"""Whole runs through `execute_run` against fake provider servers, once per provider wire.

The real SDKs (google-genai for a `gemini-` agent, openai for an `openai:` agent) talk to a local
server speaking that provider's API; the run is enqueued, claimed and executed exactly as the
worker does (helpers from `test_loop.py`). Each scenario is written once and runs for every
provider in `provider_support.WIRES` (the `provider` fixture); how a provider is configured, how
its replies are scripted and how its requests are read is that adapter's business.

* Retries, reset, thinking and two tool calls: the first turn fails with a retryable error (Gemini
  a 429 with `Retry-After`, OpenAI a 503), then breaks after partial thinking and text, then
  succeeds with thinking, text and two tool calls in one turn; the second turn gets both
  results back and answers. What was stored must show the retries and the reset as events, hold
  exactly one assistant message per turn, and add up the usage.
* Gemini only: a plan-mode run asks for JSON plans (a JSON schema, no tools) while the steps'
  turns offer the tools.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.auth.principal import Principal
from app.core import events as ev
from app.core.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage
from app.db.engine import Database
from app.queue.manager import RunQueue
from app.runtime.agent_settings import AgentSettings
from app.runtime.loop import execute_run
from app.runtime.plan_protocol import plan_schema
from tests.fakes.server import FakeServer
from tests.integration.provider_support import WIRES, Usage, Wire
from tests.integration.test_loop import events, executions, run_row, start, transcript

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=sorted(WIRES))
def provider(request: pytest.FixtureRequest) -> Wire:
    """The adapter of the provider under test (every provider unless narrowed with
    `@pytest.mark.parametrize("provider", [...], indirect=True)`)."""
    return WIRES[request.param]


@pytest.fixture
def queue(database: Database) -> RunQueue:
    return RunQueue(database)


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    fake = FakeServer()
    await fake.start()
    yield fake
    await fake.close()


def collapsed(evs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Event types with runs of the same delta type collapsed into `<type>*`."""
    out: list[str] = []
    for t, _ in evs:
        name = f"{t}*" if t in (ev.ASSISTANT_DELTA, ev.THINKING_DELTA) else t
        if not (out and out[-1] == name and name.endswith("*")):
            out.append(name)
    return out


async def test_run_with_retries_reset_thinking_and_two_calls(
    queue: RunQueue, alice: Principal, server: FakeServer, provider: Wire
) -> None:
    calls = [
        ToolCall(id="call_a", name="write_file", args={"path": "a.txt", "content": "A"}),
        ToolCall(id="call_b", name="write_file", args={"path": "b.txt", "content": "B"}),
    ]
    transient = provider.transient_error()
    server.script(
        transient.reply,
        provider.turn(thinking=("Two files",), text=("I'll wri",), cut=True),
        provider.turn(
            thinking=("Two files, ", "one call each."),
            text=("Writing ", "both."),
            calls=tuple(calls),
            usage=Usage(input=40, output=20, thinking=8),
        ),
        provider.answer("Wrote ", "both files.", usage=Usage(input=90, output=4)),
    )
    leased = await start(queue, alice, "write a.txt and b.txt", agent={"model": provider.model})
    await execute_run(leased, settings=provider.settings(server))

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
    assert str(transient.status) in retries[0]["reason"]
    assert transient.says in retries[0]["reason"]
    if transient.retry_after is not None:
        assert retries[0]["delaySeconds"] == transient.retry_after  # Retry-After, honoured
    else:
        assert 0 < retries[0]["delaySeconds"] <= 0.05
    assert 0 < retries[1]["delaySeconds"] <= 0.05
    thinking = [d["text"] for t, d in evs if t == ev.THINKING_DELTA]
    assert thinking == ["Two files", "Two files, ", "one call each."]
    assert [d for t, d in evs if t == ev.ASSISTANT_RESET] == [{}]
    assert [d["inputTokens"] for t, d in evs if t == ev.USAGE] == [40, 90]
    assert [d["outputTokens"] for t, d in evs if t == ev.USAGE] == [20, 4]  # thinking included

    stored = await transcript(leased)
    assert [m.kind for m in stored] == [
        "user",
        "assistant",
        "tool_result",
        "tool_result",
        "assistant",
    ]
    assert stored[0] == UserMessage(text="write a.txt and b.txt")
    assert stored[1] == AssistantMessage(text="Writing both.", tool_calls=calls)  # no "I'll wri"
    assert stored[4] == AssistantMessage(text="Wrote both files.")
    results = [m for m in stored if isinstance(m, ToolResult)]
    assert [(r.tool_call_id, r.ok) for r in results] == [("call_a", True), ("call_b", True)]
    assert {k: e.status for k, e in (await executions(leased)).items()} == {
        "call_a": "completed",
        "call_b": "completed",
    }
    assert (run.input_tokens, run.output_tokens) == (130, 24)

    # four requests: the error, the cut stream, the first turn, the second turn with the results
    assert len(server.requests) == 4
    first, second = server.requests[2:]
    for turn_request in (first, second):
        provider.check_turn_request(turn_request)
    assert "write_file" in (provider.declared_tools(first) or [])
    provider.check_results_sent_back(second, text="Writing both.", calls=calls)


@pytest.mark.parametrize("provider", ["gemini", "openai"], indirect=True)
async def test_plan_run_asks_for_json_plans(
    queue: RunQueue, alice: Principal, server: FakeServer, provider: Wire
) -> None:
    server.script(
        provider.answer(
            '{"steps": [{"description": "Say hi", ', '"tools": []}]}', usage=Usage(30, 10)
        ),
        provider.answer("Hi!", usage=Usage(50, 2)),
    )
    plan_mode = AgentSettings(mode="plan").dump()
    leased = await start(
        queue, alice, "greet me", agent={"model": provider.model, "settings": plan_mode}
    )
    await execute_run(leased, settings=provider.settings(server))

    run = await run_row(leased)
    assert run.status == "completed" and run.result == {"text": "Hi!"}
    evs = await events(leased)
    [created] = [d for t, d in evs if t == ev.PLAN_CREATED]
    assert [s["description"] for s in created["plan"]["steps"]] == ["Say hi"]
    assert [(d["index"], d["status"]) for t, d in evs if t == ev.PLAN_STEP] == [
        (1, "running"),
        (1, "done"),
    ]

    plan_request, step_request = server.requests
    names = provider.declared_tools(step_request)
    assert names  # the step's turn offers the tools
    assert provider.json_schema(plan_request) == plan_schema(names)
    assert provider.declared_tools(plan_request) is None  # no tools in a plan request
    assert provider.json_schema(step_request) is None
