"""The OpenAI-compatible provider: the real openai SDK against a local fake Chat Completions server."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.config import Settings
from app.core.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage
from app.llm.base import (
    Model,
    ModelError,
    ModelEvent,
    ModelRequest,
    RetryNotice,
    StreamReset,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    ToolSpec,
    Usage,
)
from app.llm.registry import ModelRegistry
from tests.fakes import openai_wire as o
from tests.fakes.server import FakeServer

KEY = "sk-test-0123456789abcdef"
TOOL = ToolSpec(
    name="write_file",
    description="Write a file.",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
)
HELLO = ModelRequest(system_prompt="You are terse.", messages=[UserMessage(text="hello")])


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    fake = FakeServer()
    await fake.start()
    yield fake
    await fake.close()


def openai(server: FakeServer, **values: Any) -> Model:
    """`openai:test-model` at the fake server, with quick retries."""
    defaults: dict[str, Any] = {
        "openai_api_key": KEY,
        "openai_base_url": f"{server.url}/v1",
        "model_max_retries": 2,
        "model_retry_initial_delay_seconds": 0.01,
        "model_retry_max_delay_seconds": 0.5,
    }
    settings = Settings(_env_file=None, **{**defaults, **values})
    return ModelRegistry.from_settings(settings).resolve("openai:test-model")


async def collect(model: Model, request: ModelRequest = HELLO) -> list[ModelEvent]:
    return [e async for e in model.stream(request)]


def final_text(events: list[ModelEvent]) -> str:
    """The answer as a client sees it: text deltas after the last reset."""
    out: list[str] = []
    for e in events:
        if isinstance(e, StreamReset):
            out = []
        elif isinstance(e, TextDelta):
            out.append(e.text)
    return "".join(out)


async def test_streams_text_reasoning_and_usage(server: FakeServer) -> None:
    server.script(
        o.stream(
            o.chunk({"role": "assistant", "content": ""}),
            o.reasoning("The user greets; "),
            o.chunk({"reasoning": "answer briefly."}),
            o.content("Hel"),
            o.content("lo!"),
            o.finish("stop"),
            o.usage(11, 6),
        )
    )
    events = await collect(openai(server))
    assert events == [
        ThinkingDelta("The user greets; "),
        ThinkingDelta("answer briefly."),
        TextDelta("Hel"),
        TextDelta("lo!"),
        Usage(input_tokens=11, output_tokens=6),
    ]
    [request] = server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["x-stainless-retry-count"] == "0"
    body = request.json()
    assert body["model"] == "test-model" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hello"},
    ]
    assert "tools" not in body


async def test_tool_calls_assembled_from_fragments(server: FakeServer) -> None:
    server.script(
        o.stream(
            o.content("Writing two files."),
            o.tool_call(0, id="call_a", name="write_file", args=""),
            o.tool_call(0, args='{"path": "a.'),
            o.tool_call(1, id="call_b", name="write_file", args='{"path"'),
            o.tool_call(0, args='txt", "content": "A"}'),
            o.tool_call(1, args=': "b.txt", "content": "B"}'),
            o.tool_call(2, id="call_c", name="write_file", args='{"path": "c.txt", "content": '),
            o.finish("tool_calls"),
            o.usage(30, 12),
        )
    )
    request = ModelRequest(system_prompt="", messages=[UserMessage(text="write")], tools=[TOOL])
    events = await collect(openai(server), request)
    calls = [e.call for e in events if isinstance(e, ToolCallEvent)]
    assert calls == [
        ToolCall(id="call_a", name="write_file", args={"path": "a.txt", "content": "A"}),
        ToolCall(id="call_b", name="write_file", args={"path": "b.txt", "content": "B"}),
        ToolCall(id="call_c", name="write_file", args={"_raw": '{"path": "c.txt", "content": '}),
    ]
    assert events[0] == TextDelta("Writing two files.") and events[-1] == Usage(30, 12)
    assert server.requests[0].json()["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "write_file",
                "description": "Write a file.",
                "parameters": TOOL.parameters,
            },
        }
    ]


async def test_tool_results_are_sent_back(server: FakeServer) -> None:
    server.script(o.answer("Both done."))
    calls = [
        ToolCall(id="call_a", name="write_file", args={"path": "a.txt", "content": "A"}),
        ToolCall(id="call_b", name="write_file", args={"_raw": "{oops"}),
    ]
    request = ModelRequest(
        system_prompt="sys",
        messages=[
            UserMessage(text="write"),
            AssistantMessage(text="", tool_calls=calls),
            ToolResult(tool_call_id="call_a", name="write_file", ok=True, result={"size": 1}),
            ToolResult(tool_call_id="call_b", name="write_file", ok=False, error="invalid"),
        ],
        tools=[TOOL],
    )
    assert final_text(await collect(openai(server), request)) == "Both done."
    messages = server.requests[0].json()["messages"]
    assert messages[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "write_file", "arguments": json.dumps(calls[0].args)},
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "write_file", "arguments": '{"_raw": "{oops"}'},
            },
        ],
    }
    assert messages[3:] == [
        {"role": "tool", "tool_call_id": "call_a", "content": '{"size": 1}'},
        {"role": "tool", "tool_call_id": "call_b", "content": '{"error": "invalid"}'},
    ]


async def test_429_retry_after_is_honoured(server: FakeServer) -> None:
    server.script(
        o.error(
            429, "Rate limit reached for requests", type_="requests", headers={"retry-after": "0.3"}
        ),
        o.answer("after ", "waiting"),
    )
    events = await collect(openai(server))
    [notice] = [e for e in events if isinstance(e, RetryNotice)]
    assert (notice.attempt, notice.delay_seconds) == (1, 0.3)
    assert "429" in notice.reason and "Rate limit reached" in notice.reason
    assert final_text(events) == "after waiting"
    first, second = server.requests
    assert second.at - first.at >= 0.3


async def test_500_then_success(server: FakeServer) -> None:
    server.script(o.error(500, "The server had an error", type_="server_error"), o.answer("fine"))
    events = await collect(openai(server))
    assert [type(e).__name__ for e in events] == ["RetryNotice", "TextDelta", "Usage"]
    assert final_text(events) == "fine" and len(server.requests) == 2


async def test_rate_limit_runs_out(server: FakeServer) -> None:
    server.script(*[o.error(429, "Rate limit reached", headers={"retry-after": "0"})] * 3)
    with pytest.raises(ModelError) as info:
        await collect(openai(server))
    assert info.value.code == "model_rate_limited" and "Rate limit reached" in info.value.message
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    ("status", "message", "error_code", "code"),
    [
        (400, "Invalid value for 'messages'.", None, "model_bad_request"),
        (401, "Incorrect API key provided.", "invalid_api_key", "model_auth_failed"),
        (403, "You are not allowed to use this model.", None, "model_auth_failed"),
        (404, "The model `test-model` does not exist.", "model_not_found", "model_not_found"),
        (400, "Too long for this model.", "context_length_exceeded", "model_context_too_long"),
    ],
)
async def test_permanent_failures_fail_fast(
    server: FakeServer, status: int, message: str, error_code: str | None, code: str
) -> None:
    server.script(o.error(status, message, code=error_code), o.answer("never"))
    with pytest.raises(ModelError) as info:
        await collect(openai(server))
    assert info.value.code == code and message in info.value.message
    assert len(server.requests) == 1


async def test_content_filter_blocks(server: FakeServer) -> None:
    server.script(o.stream(o.content("Sure, "), o.finish("content_filter"), o.usage(5, 2)))
    with pytest.raises(ModelError) as info:
        await collect(openai(server))
    assert info.value.code == "model_safety_block" and len(server.requests) == 1


async def test_stream_cut_after_partial_text_restarts_cleanly(server: FakeServer) -> None:
    server.script(
        o.stream(o.content("Partial "), o.content("answ"), cut=True),
        o.answer("Complete ", "answer."),
    )
    events = await collect(openai(server))
    assert [type(e).__name__ for e in events] == [
        "TextDelta",
        "TextDelta",
        "StreamReset",
        "RetryNotice",
        "TextDelta",
        "TextDelta",
        "Usage",
    ]
    assert final_text(events) == "Complete answer."


async def test_read_timeout_is_retried(server: FakeServer) -> None:
    server.script(o.stream(o.content("zzz"), hang=True), o.answer("awake"))
    events = await collect(openai(server, model_request_timeout_seconds=0.3))
    [notice] = [e for e in events if isinstance(e, RetryNotice)]
    assert "timed out" in notice.reason.lower()
    assert final_text(events) == "awake"


async def test_connection_refused_is_retried_then_fails(server: FakeServer) -> None:
    url = server.url
    await server.close()  # nothing listens on the port any more
    model = openai(server, openai_base_url=f"{url}/v1", model_max_retries=1)
    with pytest.raises(ModelError) as info:
        await collect(model)
    assert info.value.code == "model_unavailable_transient"
    assert "2 attempts" in info.value.message


async def test_cancel_closes_the_stream_promptly(server: FakeServer) -> None:
    server.script(o.stream(o.content("slow "), hang=True))
    first = asyncio.Event()

    async def consume() -> None:
        async for event in openai(server).stream(HELLO):
            if isinstance(event, TextDelta):
                first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 5)
    begin = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - begin < 1
    await asyncio.wait_for(server.disconnected.wait(), 1)


async def test_base_url_alone_needs_no_key(server: FakeServer) -> None:
    server.script(o.answer("local"))
    assert final_text(await collect(openai(server, openai_api_key=None))) == "local"
    assert server.requests[0].headers["authorization"] == "Bearer unused"


# ---------------------------------------------------------------------------- structured output

PLAN_SCHEMA = {
    "type": "object",
    "properties": {"steps": {"type": "array", "items": {"type": "string"}}},
    "required": ["steps"],
}
PLAN = ModelRequest(
    system_prompt="Plan.",
    messages=[UserMessage(text="do a")],
    response_schema=PLAN_SCHEMA,
    purpose="plan",
)
PLAN_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "plan", "schema": PLAN_SCHEMA, "strict": False},
}


async def test_response_schema_is_sent_as_response_format(server: FakeServer) -> None:
    server.script(o.answer('{"steps": ["a"]}'), o.answer("free"))
    model = openai(server)
    assert final_text(await collect(model, PLAN)) == '{"steps": ["a"]}'
    await collect(model)  # a free-text request has none
    assert server.requests[0].json()["response_format"] == PLAN_FORMAT
    assert "response_format" not in server.requests[1].json()


async def test_no_response_format_with_tools_or_when_switched_off(server: FakeServer) -> None:
    server.script(o.answer("{}"), o.answer("{}"))
    with_tools = ModelRequest(
        system_prompt="", messages=[UserMessage(text="x")], tools=[TOOL], response_schema={}
    )
    await collect(openai(server), with_tools)
    await collect(openai(server, openai_structured_output=False), PLAN)
    assert ["response_format" in r.json() for r in server.requests] == [False, False]


async def test_server_rejecting_response_format_gets_it_no_more(server: FakeServer) -> None:
    server.script(
        o.error(400, "response_format of type json_schema is not supported by this server"),
        o.answer('{"steps": ["a"]}'),
        o.answer('{"steps": ["b"]}'),
    )
    model = openai(server)
    events = await collect(model, PLAN)
    assert not any(isinstance(e, RetryNotice) for e in events)  # not a failure: no retry event
    assert final_text(events) == '{"steps": ["a"]}'
    assert final_text(await collect(model, PLAN)) == '{"steps": ["b"]}'
    sent = [r.json() for r in server.requests]
    assert sent[0]["response_format"] == PLAN_FORMAT
    assert "response_format" not in sent[1] and "response_format" not in sent[2]
    assert sent[1]["messages"] == sent[0]["messages"]


async def test_other_bad_requests_with_response_format_still_fail_fast(
    server: FakeServer,
) -> None:
    server.script(o.error(400, "Invalid value for 'messages'."), o.answer("never"))
    with pytest.raises(ModelError) as info:
        await collect(openai(server), PLAN)
    assert info.value.code == "model_bad_request" and len(server.requests) == 1


# ---------------------------------------------------------------------------- environment, errors


async def test_environment_base_url_reaches_the_server(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "DEFAULT_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")  # alone: a local server, no key
    server.script(o.answer("from ", "env"))
    registry = ModelRegistry.from_settings(Settings(_env_file=None))
    assert final_text(await collect(registry.resolve("openai:llama3.1:8b"))) == "from env"
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.json()["model"] == "llama3.1:8b"
    assert request.headers["authorization"] == "Bearer unused"


async def test_error_event_in_the_stream_is_retried(server: FakeServer) -> None:
    overloaded = {"error": {"message": "Upstream model overloaded", "type": "server_error"}}
    server.script(o.stream(o.content("Half an "), overloaded), o.answer("Whole answer."))
    events = await collect(openai(server))
    assert [type(e).__name__ for e in events] == [
        "TextDelta",
        "StreamReset",
        "RetryNotice",
        "TextDelta",
        "Usage",
    ]
    [notice] = [e for e in events if isinstance(e, RetryNotice)]
    assert "Upstream model overloaded" in notice.reason
    assert final_text(events) == "Whole answer." and len(server.requests) == 2


@pytest.mark.parametrize(
    ("code", "expected"),
    [(400, "model_bad_request"), ("401", "model_auth_failed"), (429, "model_rate_limited")],
)
async def test_error_event_with_a_status_code_is_classified_by_it(
    server: FakeServer, code: int | str, expected: str
) -> None:
    event = {"error": {"message": "Rejected mid-stream", "code": code}}
    server.script(*[o.stream(event)] * 3)
    with pytest.raises(ModelError) as info:
        await collect(openai(server))
    assert info.value.code == expected and "Rejected mid-stream" in info.value.message
    assert len(server.requests) == (3 if expected == "model_rate_limited" else 1)
