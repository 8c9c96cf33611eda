"""The offline model's rules: tool lines, summaries, streamed echo, /fail, /sleep, usage."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.config import Settings
from app.core.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage
from app.llm.base import (
    Message,
    ModelError,
    ModelEvent,
    ModelRequest,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    Usage,
)
from app.llm.offline import OfflineModel, parse_directives, quote, summary_line
from app.llm.registry import ModelRegistry, ModelUnavailableError


async def collect(*messages: Message) -> list[ModelEvent]:
    model = OfflineModel()
    return [e async for e in model.stream(ModelRequest(system_prompt="", messages=messages))]


def text_of(events: list[ModelEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def calls_of(events: list[ModelEvent]) -> list[ToolCall]:
    return [e.call for e in events if isinstance(e, ToolCallEvent)]


async def test_echo_streams_message_verbatim_in_chunks() -> None:
    message = "Hello there, offline model!\nSecond line  with  spaces."
    events = await collect(UserMessage(text=message))
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) >= 2
    assert message in text_of(events)
    assert calls_of(events) == []
    usage = [e for e in events if isinstance(e, Usage)]
    assert len(usage) == 1 and usage[0].input_tokens > 0 and usage[0].output_tokens > 0


async def test_short_and_empty_messages_still_stream_two_chunks() -> None:
    for message in ("x", ""):
        deltas = [e for e in await collect(UserMessage(text=message)) if isinstance(e, TextDelta)]
        assert len(deltas) >= 2


async def test_tool_lines_become_calls_in_order() -> None:
    message = (
        "please do this\n"
        '/tool write_file {"path": "a.txt", "content": "hi"}\n'
        "  /tool list_files  \n"
        "/tool read_file {not json}\n"
        "/tool read_file [1, 2]\n"
    )
    events = await collect(UserMessage(text=message))
    calls = calls_of(events)
    assert [c.name for c in calls] == ["write_file", "list_files", "read_file", "read_file"]
    assert calls[0].args == {"path": "a.txt", "content": "hi"}
    assert calls[1].args == {}
    assert calls[2].args == {"_raw": "{not json}"}
    assert calls[3].args == {"_raw": "[1, 2]"}
    assert len({c.id for c in calls}) == 4
    assert text_of(events) == ""
    # deterministic: the same request gives the same ids
    assert [c.id for c in calls_of(await collect(UserMessage(text=message)))] == [
        c.id for c in calls
    ]


async def test_summary_after_tool_results() -> None:
    calls = [
        ToolCall(id="c1", name="write_file", args={}),
        ToolCall(id="c2", name="read_file", args={}),
    ]
    long_error = "no such file: " + "x" * 200
    events = await collect(
        UserMessage(text="/tool write_file\n/tool read_file"),
        AssistantMessage(tool_calls=calls),
        ToolResult(tool_call_id="c1", name="write_file", ok=True, result={"path": "a.txt"}),
        ToolResult(tool_call_id="c2", name="read_file", ok=False, error=long_error),
    )
    assert calls_of(events) == []
    lines = text_of(events).split("\n")
    assert lines[0] == 'write_file ok: {"path": "a.txt"}'
    assert lines[1].startswith("read_file failed: no such file: xxx")
    assert len(lines[1]) <= len("read_file failed: ") + 80


def test_quote_and_summary_line_limits() -> None:
    assert quote("a\nb   c") == "a b c"
    assert len(quote("y" * 500)) == 80
    line = summary_line(ToolResult(tool_call_id="c", name="t", ok=True, result="z" * 100))
    assert line.startswith("t ok: zzz") and len(line) == len("t ok: ") + 80


async def test_fail_raises_model_error() -> None:
    with pytest.raises(ModelError) as info:
        await collect(UserMessage(text="please\n/fail"))
    assert info.value.code == "model_error" and "/fail" in info.value.message


async def test_think_streams_reasoning_before_the_first_turn() -> None:
    events = await collect(UserMessage(text="/think weigh it up\n/tool list_files"))
    thoughts = [e for e in events if isinstance(e, ThinkingDelta)]
    assert len(thoughts) == 2 and "".join(t.text for t in thoughts) == "weigh it up"
    assert events.index(thoughts[-1]) < events.index(
        next(e for e in events if isinstance(e, ToolCallEvent))
    )
    assert parse_directives("/think a\n/think b").thinking == ["a", "b"]


async def test_sleep_waits_then_answers() -> None:
    begin = time.monotonic()
    events = await collect(UserMessage(text="/sleep 150\nhi"))
    assert time.monotonic() - begin >= 0.14  # timers may fire within the clock resolution
    assert "hi" in text_of(events)


async def test_sleep_waits_before_the_answer_not_before_tool_calls() -> None:
    user = UserMessage(text="/tool list_files\n/sleep 150")
    begin = time.monotonic()
    first = await collect(user)
    assert time.monotonic() - begin < 0.1 and len(calls_of(first)) == 1
    call = calls_of(first)[0]
    begin = time.monotonic()
    answer = await collect(
        user,
        AssistantMessage(tool_calls=[call]),
        ToolResult(tool_call_id=call.id, name=call.name, ok=True, result=[]),
    )
    assert time.monotonic() - begin >= 0.14
    assert "list_files ok" in text_of(answer)


async def test_sleep_is_cancellable() -> None:
    task = asyncio.create_task(collect(UserMessage(text="/sleep 10000")))
    await asyncio.sleep(0.05)
    begin = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - begin < 0.5


def test_parse_directives() -> None:
    found = parse_directives("/sleep 5\n/sleep 7\n/fail\n/toolbox x\n/tool\nplain")
    assert found.sleep_ms == 12 and found.fail and found.tool_calls == []


def test_registry_resolves_offline_and_default() -> None:
    registry = ModelRegistry.from_settings(Settings())
    assert isinstance(registry.resolve("offline"), OfflineModel)
    assert registry.resolve("default") is registry.resolve("offline")
    assert registry.resolve(None) is registry.resolve("offline")
    with pytest.raises(ModelUnavailableError) as info:
        registry.resolve("gemini-9-ultra")
    assert info.value.code == "model_unavailable"
    assert "gemini-9-ultra" in info.value.message and "offline" in info.value.message


def test_registry_prefix_longest_wins() -> None:
    registry = ModelRegistry()
    registry.register_prefix("openai:", lambda name: OfflineModel(name))
    registry.register_prefix("openai:gpt-", lambda name: OfflineModel("special:" + name))
    assert registry.resolve("openai:gpt-5").name == "special:openai:gpt-5"
    assert registry.resolve("openai:o3").name == "openai:o3"


async def test_next_gives_each_turn_its_own_calls() -> None:
    message = UserMessage(
        text='/tool read_file {"path": "a"}\n/next\n/sleep 20\n/tool list_files {}\n/next\nbye'
    )
    first = calls_of(await collect(message))
    assert [c.name for c in first] == ["read_file"]
    turn1 = AssistantMessage(tool_calls=first)
    result1 = ToolResult(tool_call_id=first[0].id, name="read_file", ok=True, result="A")
    started = time.monotonic()
    second = calls_of(await collect(message, turn1, result1))
    assert time.monotonic() - started >= 0.02  # the block's own /sleep, before its calls
    assert [c.name for c in second] == ["list_files"]
    assert second[0].id != first[0].id
    turn2 = AssistantMessage(tool_calls=second)
    result2 = ToolResult(tool_call_id=second[0].id, name="list_files", ok=True, result=[])
    final = await collect(message, turn1, result1, turn2, result2)
    assert calls_of(final) == [] and text_of(final) == "list_files ok: []"


async def test_without_next_the_legacy_rules_hold() -> None:
    message = UserMessage(text='/tool read_file {"path": "a"}')
    first = calls_of(await collect(message))
    result = ToolResult(tool_call_id=first[0].id, name="read_file", ok=True, result="A")
    again = await collect(message, AssistantMessage(tool_calls=first), result)
    assert calls_of(again) == [] and text_of(again) == "read_file ok: A"
