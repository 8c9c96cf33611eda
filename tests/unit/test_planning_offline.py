"""The offline model's plan-mode rules: `/plan`, `/replan`, `/plan-invalid(-once)`, step turns."""

from __future__ import annotations

import json
from typing import Any

from app.core.transcript import AssistantMessage, ToolResult, UserMessage
from app.llm.base import Message, ModelEvent, ModelRequest, TextDelta, ToolCallEvent, Usage
from app.llm.offline import OfflineModel, parse_args
from app.llm.offline_plan import MALFORMED_PLAN, parse_steps
from app.runtime.plan_protocol import StepSpec, new_plan, parse_plan, render_plan


async def ask(*messages: Message, purpose: Any = "chat") -> list[ModelEvent]:
    request = ModelRequest(system_prompt="", messages=messages, purpose=purpose)
    return [e async for e in OfflineModel().stream(request)]


def text_of(events: list[ModelEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_steps_with_inline_tools() -> None:
    steps = parse_steps(
        'write /tool write_file {"path": "a", "content": "x"} /tool list_files; ; /tool read_file',
        parse_args,
    )
    assert [(s.description, [c[:2] for c in s.calls]) for s in steps] == [
        ("write", [("write_file", {"path": "a", "content": "x"}), ("list_files", {})]),
        ("Use read_file", [("read_file", {})]),
    ]


async def test_plan_answers_are_valid_plans() -> None:
    message = UserMessage(text='go\n/plan read /tool read_file {"path": "a"}; summarise')
    events = await ask(message, UserMessage(text="plan it"), purpose="plan")
    assert [type(e) for e in events][-1] is Usage
    assert parse_plan(text_of(events), ["read_file"]) == [
        StepSpec("read", ("read_file",)),
        StepSpec("summarise"),
    ]
    default = text_of(await ask(UserMessage(text="no directives"), purpose="plan"))
    assert json.loads(default) == {"steps": [{"description": "Answer the request", "tools": []}]}


async def test_invalid_plans_on_request() -> None:
    always = UserMessage(text="/plan-invalid\n/plan a")
    assert text_of(await ask(always, purpose="plan")) == MALFORMED_PLAN
    reasked = [always, AssistantMessage(text=MALFORMED_PLAN), UserMessage(text="again")]
    assert text_of(await ask(*reasked, purpose="plan")) == MALFORMED_PLAN

    once = UserMessage(text="/plan-invalid-once\n/plan a")
    assert text_of(await ask(once, purpose="plan")) == MALFORMED_PLAN
    again = [once, AssistantMessage(text=MALFORMED_PLAN), UserMessage(text="again")]
    assert json.loads(text_of(await ask(*again, purpose="plan")))["steps"][0]["description"] == "a"


async def test_revisions_use_replan() -> None:
    plan = new_plan([StepSpec("a")])
    history: list[Message] = [
        UserMessage(text="/plan a\n/replan b; c"),
        AssistantMessage(text=render_plan(plan), plan=plan),
    ]
    revised = json.loads(text_of(await ask(*history, purpose="plan")))
    assert [s["description"] for s in revised["steps"]] == ["b", "c"]
    history[0] = UserMessage(text="/plan a")
    revised = json.loads(text_of(await ask(*history, purpose="plan")))
    assert [s["description"] for s in revised["steps"]] == ["Wrap up"]


async def test_step_turns_call_the_steps_tools_then_report() -> None:
    plan = new_plan([StepSpec("write", ("write_file",)), StepSpec("think")])
    history: list[Message] = [
        UserMessage(text='/plan write /tool write_file {"path": "a"}; think'),
        AssistantMessage(text=render_plan(plan), plan=plan),
        UserMessage(text="carry out step 1", step=1),
    ]
    [call_event, _usage] = await ask(*history)
    assert isinstance(call_event, ToolCallEvent)
    assert (call_event.call.name, call_event.call.args) == ("write_file", {"path": "a"})

    ok = ToolResult(tool_call_id=call_event.call.id, name="write_file", ok=True, result="saved")
    after = [*history, AssistantMessage(tool_calls=[call_event.call]), ok]
    assert text_of(await ask(*after)) == "Step 1 done: write\nwrite_file ok: saved"
    failed = ok.model_copy(update={"ok": False, "result": None, "error": "disk full"})
    after[-1] = failed
    assert text_of(await ask(*after)) == "Step 1 failed: write\nwrite_file failed: disk full"

    second = [*after, AssistantMessage(text="..."), UserMessage(text="carry on", step=2)]
    events = await ask(*second)
    assert text_of(events) == "Step 2 done: think"
    assert sum(isinstance(e, TextDelta) for e in events) >= 2
