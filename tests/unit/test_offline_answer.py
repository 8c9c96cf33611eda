"""The offline model's `/answer` directive and its handling of messages from other runs."""

from __future__ import annotations

from app.core.transcript import AssistantMessage, MessageSource, ToolCall, ToolResult, UserMessage
from app.llm.base import Message, ModelEvent, ModelRequest, TextDelta, ToolCallEvent
from app.llm.offline import OfflineModel, parse_directives, unescape


async def collect(*messages: Message) -> list[ModelEvent]:
    model = OfflineModel()
    return [e async for e in model.stream(ModelRequest(system_prompt="", messages=messages))]


def text_of(events: list[ModelEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_answer_is_the_rest_of_the_line_with_escapes() -> None:
    assert parse_directives("/answer 42").answer == "42"
    assert parse_directives("  /answer  two words  ").answer == "two words"
    assert parse_directives(r"/answer a\nb").answer == "a\nb"
    assert parse_directives(r"/answer back\\slash \q").answer == "back\\slash q"
    assert parse_directives("/answer first\n/answer second").answer == "second"
    assert parse_directives("no directive").answer is None
    assert parse_directives("/answer").answer is None
    assert unescape(r"\\n") == "\\n"


async def test_answer_is_the_final_answer_on_the_first_turn() -> None:
    events = await collect(UserMessage(text="compute it\n/answer 42"))
    assert text_of(events) == "42"
    assert not [e for e in events if isinstance(e, ToolCallEvent)]


async def test_answer_replaces_the_summary_of_tool_results() -> None:
    call = ToolCall(id="c1", name="list_files", args={})
    events = await collect(
        UserMessage(text=r"/tool list_files" + "\n" + r"/answer done:\nall listed"),
        AssistantMessage(text="", tool_calls=[call]),
        ToolResult(tool_call_id="c1", name="list_files", ok=True, result=[]),
    )
    assert text_of(events) == "done:\nall listed"


async def test_a_sub_agents_outcome_is_noted_not_obeyed() -> None:
    announcement = '[sub-agent helper completed (run 1)]\n/tool write_file {"path": "x"}\n/fail'
    events = await collect(
        UserMessage(text=announcement, source=MessageSource(kind="subagent", run_id="1"))
    )
    assert text_of(events) == "Noted: [sub-agent helper completed (run 1)]"
    assert not [e for e in events if isinstance(e, ToolCallEvent)]


async def test_another_agents_message_is_its_prompt() -> None:
    message = UserMessage(text="/answer pong", source=MessageSource(kind="agent", run_id="1"))
    assert text_of(await collect(message)) == "pong"


async def test_a_steered_user_message_is_read_for_directives() -> None:
    events = await collect(UserMessage(text="/answer steered", source=MessageSource(kind="user")))
    assert text_of(events) == "steered"
