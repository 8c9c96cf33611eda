"""Whole runs through `execute_run` with a `gemini-` agent, against a fake Gemini API server.

The real google-genai SDK talks to a local server speaking the Gemini API; the run is enqueued,
claimed and executed exactly as the worker does (helpers from `test_loop.py`). The scripted first
turn is rate limited (429), then breaks after partial thinking and text, then succeeds with
thought summaries, text and two function calls in one turn; the second turn gets both results
back as function responses and answers. What was stored must show the retries and the reset as
events, hold exactly one assistant message per turn, and add up the usage metadata.

A plan-mode run shows that plan requests ask for JSON (`responseJsonSchema`, no tools) while the
steps' turns offer the tools.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.auth.principal import Principal
from app.config import Settings
from app.core import events as ev
from app.core.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage
from app.db.engine import Database
from app.queue.manager import RunQueue
from app.runtime.agent_settings import AgentSettings
from app.runtime.loop import execute_run
from app.runtime.plan_protocol import plan_schema
from tests.fakes import gemini_wire as g
from tests.fakes.server import FakeServer
from tests.integration.test_loop import events, executions, run_row, start, transcript

pytestmark = pytest.mark.timeout(60)

MODEL = "gemini-2.5-flash"
KEY = "test-gemini-key-0123456789"


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
        gemini_api_key=KEY,
        google_api_key=None,
        google_genai_use_vertexai=False,
        google_gemini_base_url=server.url,
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


async def test_gemini_run_with_retries_reset_thinking_and_two_calls(
    queue: RunQueue, alice: Principal, server: FakeServer
) -> None:
    server.script(
        g.error(
            429,
            "Resource has been exhausted (e.g. check quota).",
            "RESOURCE_EXHAUSTED",
            headers={"Retry-After": "0.02"},
        ),
        g.stream(g.chunk(g.text("Two files", thought=True)), g.chunk(g.text("I'll wri")), cut=True),
        g.stream(
            g.chunk(g.text("Two files, ", thought=True)),
            g.chunk(g.text("one call each.", thought=True)),
            g.chunk(g.text("Writing ")),
            g.chunk(g.text("both.")),
            g.chunk(
                g.call("write_file", {"path": "a.txt", "content": "A"}, id="fc-a", signature=b"s1")
            ),
            g.chunk(
                g.call("write_file", {"path": "b.txt", "content": "B"}, id="fc-b"),
                finish="STOP",
                usage=(40, 12, 8),
            ),
        ),
        g.answer("Wrote ", "both files.", usage=(90, 4, 0)),
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
    assert "429" in retries[0]["reason"] and "Resource has been exhausted" in retries[0]["reason"]
    assert retries[0]["delaySeconds"] == 0.02  # Retry-After, honoured
    assert 0 < retries[1]["delaySeconds"] <= 0.05
    thinking = [d["text"] for t, d in evs if t == ev.THINKING_DELTA]
    assert thinking == ["Two files", "Two files, ", "one call each."]
    assert [d["inputTokens"] for t, d in evs if t == ev.USAGE] == [40, 90]
    assert [d["outputTokens"] for t, d in evs if t == ev.USAGE] == [20, 4]  # thoughts included

    calls = [
        ToolCall(id="fc-a", name="write_file", args={"path": "a.txt", "content": "A"}),
        ToolCall(id="fc-b", name="write_file", args={"path": "b.txt", "content": "B"}),
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
    assert stored[1] == AssistantMessage(text="Writing both.", tool_calls=calls)  # no "I'll wri"
    assert stored[4] == AssistantMessage(text="Wrote both files.")
    results = [m for m in stored if isinstance(m, ToolResult)]
    assert [(r.tool_call_id, r.ok) for r in results] == [("fc-a", True), ("fc-b", True)]
    assert {k: e.status for k, e in (await executions(leased)).items()} == {
        "fc-a": "completed",
        "fc-b": "completed",
    }
    assert (run.input_tokens, run.output_tokens) == (130, 24)

    # four requests: 429, the cut stream, the first turn, the second turn with the results
    assert len(server.requests) == 4
    first = server.requests[2].json()
    declared = [d["name"] for d in first["tools"][0]["functionDeclarations"]]
    assert "write_file" in declared
    thinking_config = first["generationConfig"]["thinkingConfig"]
    assert thinking_config.get("includeThoughts", thinking_config.get("include_thoughts")) is True
    contents = server.requests[3].json()["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    model_parts = contents[1]["parts"]
    assert model_parts[0] == {"text": "Writing both."}
    assert [p["functionCall"]["id"] for p in model_parts[1:]] == ["fc-a", "fc-b"]
    assert base64.b64decode(model_parts[1]["thoughtSignature"]) == b"s1"
    responses = [p["functionResponse"] for p in contents[2]["parts"]]
    assert [(r["id"], r["name"]) for r in responses] == [
        ("fc-a", "write_file"),
        ("fc-b", "write_file"),
    ]
    assert all(set(r["response"]) == {"output"} for r in responses)


async def test_gemini_plan_run_asks_for_json_plans(
    queue: RunQueue, alice: Principal, server: FakeServer
) -> None:
    server.script(
        g.answer('{"steps": [{"description": "Say hi", ', '"tools": []}]}', usage=(30, 10, 0)),
        g.answer("Hi!", usage=(50, 2, 0)),
    )
    plan_mode = AgentSettings(mode="plan").dump()
    leased = await start(queue, alice, "greet me", agent={"model": MODEL, "settings": plan_mode})
    await execute_run(leased, settings=settings(server))

    run = await run_row(leased)
    assert run.status == "completed" and run.result == {"text": "Hi!"}
    evs = await events(leased)
    [created] = [d for t, d in evs if t == ev.PLAN_CREATED]
    assert [s["description"] for s in created["plan"]["steps"]] == ["Say hi"]
    assert [(d["index"], d["status"]) for t, d in evs if t == ev.PLAN_STEP] == [
        (1, "running"),
        (1, "done"),
    ]

    plan_request, step_request = (r.json() for r in server.requests)
    config = plan_request["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    names = [d["name"] for d in step_request["tools"][0]["functionDeclarations"]]
    assert config["responseJsonSchema"] == plan_schema(names)
    assert "tools" not in plan_request
    assert "responseMimeType" not in step_request["generationConfig"]
