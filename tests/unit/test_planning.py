"""Plan mode's pure parts: schema validation, revisions, step outcomes, progress from messages."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from app.core.transcript import (
    AssistantMessage,
    Plan,
    ToolCall,
    ToolResult,
    UserMessage,
    dump_message,
    load_message,
)
from app.llm.base import Message
from app.runtime.plan_protocol import (
    MAX_STEPS,
    PlanInvalidError,
    PlanProgress,
    StepSpec,
    new_plan,
    parse_plan,
    plan_schema,
    render_plan,
    revised_plan,
    step_failure,
)

TOOLS = ["read_file", "write_file"]


def plan_text(*steps: dict[str, Any]) -> str:
    return json.dumps({"steps": list(steps)})


# ------------------------------------------------------------------ schema and parsing


def test_a_valid_plan_parses() -> None:
    text = plan_text(
        {"description": " Read the notes ", "tools": ["read_file", "read_file"]},
        {"description": "Summarise", "tools": []},
    )
    assert parse_plan(text, TOOLS) == [
        StepSpec("Read the notes", ("read_file",)),
        StepSpec("Summarise", ()),
    ]


@pytest.mark.parametrize("fence", ["```json\n{}\n```", "```\n{}\n```", "  ```JSON {} ```  "])
def test_code_fences_are_stripped(fence: str) -> None:
    body = plan_text({"description": "x", "tools": []})
    assert parse_plan(fence.replace("{}", body), TOOLS) == [StepSpec("x")]


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        ("", "the answer is empty"),
        ("Sure! Here is my plan: do it", "not valid JSON"),
        ('{"steps": [', "not valid JSON"),
        ("[]", "(the answer): [] is not of type 'object'"),
        ('{"steps": []}', "steps: [] should be non-empty"),
        ('{"plan": []}', "'steps' is a required property"),
        (plan_text({"description": "x"}), "steps[0]: 'tools' is a required property"),
        (
            plan_text({"description": "", "tools": []}),
            "steps[0].description: '' should be non-empty",
        ),
        (
            plan_text({"description": "  ", "tools": []}),
            "steps[0].description: '  ' does not match",
        ),
        (plan_text({"description": 5, "tools": []}), "steps[0].description: 5 is not of type"),
        (
            plan_text({"description": "ok", "tools": []}, {"description": "x", "tools": ["rm"]}),
            "steps[1].tools[0]: 'rm' is not one of ['read_file', 'write_file']",
        ),
        (
            plan_text({"description": "x", "tools": [], "why": "extra"}),
            "Additional properties are not allowed ('why' was unexpected)",
        ),
        (
            plan_text(*[{"description": "x", "tools": []}] * (MAX_STEPS + 1)),
            "steps: [",
        ),
    ],
)
def test_invalid_plans_say_what_is_wrong(answer: str, error: str) -> None:
    with pytest.raises(PlanInvalidError) as caught:
        parse_plan(answer, TOOLS)
    assert error in caught.value.message


def test_several_problems_are_counted() -> None:
    text = plan_text({"description": "", "tools": ["rm"]}, {"tools": 3})
    with pytest.raises(PlanInvalidError, match=r"and \d more problems"):
        parse_plan(text, TOOLS)


def test_without_tools_a_step_may_name_none() -> None:
    assert parse_plan(plan_text({"description": "x", "tools": []}), []) == [StepSpec("x")]
    with pytest.raises(PlanInvalidError, match="tools"):
        parse_plan(plan_text({"description": "x", "tools": ["read_file"]}), [])


def test_the_schema_is_a_valid_json_schema() -> None:
    for names in (TOOLS, []):
        jsonschema.Draft202012Validator.check_schema(plan_schema(names))
    assert plan_schema(["b", "a", "b"])["properties"]["steps"]["items"]["properties"]["tools"][
        "items"
    ]["enum"] == ["a", "b"]


# ------------------------------------------------------------------ plans and revisions


def test_new_and_revised_plans_keep_indices_stable() -> None:
    plan = new_plan([StepSpec("a", ("read_file",)), StepSpec("b"), StepSpec("c")])
    assert [(s.index, s.status) for s in plan.steps] == [
        (1, "pending"),
        (2, "pending"),
        (3, "pending"),
    ]
    progressed = Plan(
        steps=[
            plan.steps[0].model_copy(update={"status": "done"}),
            plan.steps[1].model_copy(update={"status": "running"}),
            plan.steps[2],
        ]
    )
    revised = revised_plan(progressed, 2, "step 2 failed: boom", [StepSpec("d"), StepSpec("e")])
    assert [(s.index, s.description, s.status) for s in revised.steps] == [
        (1, "a", "done"),
        (2, "b", "failed"),
        (3, "c", "skipped"),
        (4, "d", "pending"),
        (5, "e", "pending"),
    ]
    assert (revised.revision, revised.reason) == (1, "step 2 failed: boom")
    assert render_plan(revised).splitlines() == [
        "Revised plan (step 2 failed: boom):",
        "1. a [tools: read_file] (done)",
        "2. b (failed)",
        "3. c (skipped)",
        "4. d",
        "5. e",
    ]


def test_plan_messages_round_trip_and_plain_messages_stay_unchanged() -> None:
    plan = new_plan([StepSpec("a", ("read_file",))])
    message = AssistantMessage(text=render_plan(plan), plan=plan)
    assert load_message(dump_message(message)) == message
    step = UserMessage(text="do it", step=1)
    assert dump_message(step) == {"kind": "user", "text": "do it", "step": 1}
    assert load_message(dump_message(step)) == step
    assert dump_message(UserMessage(text="hi")) == {"kind": "user", "text": "hi"}
    assert dump_message(AssistantMessage(text="x")) == {
        "kind": "assistant",
        "text": "x",
        "toolCalls": [],
    }


# ------------------------------------------------------------------ step outcomes


CALL = ToolCall(id="c1", name="read_file", args={})


def result(ok: bool) -> ToolResult:
    return ToolResult(tool_call_id="c1", name="read_file", ok=ok, error=None if ok else "no file")


@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        ([AssistantMessage(text="All done.")], None),
        ([AssistantMessage(text="step failed: the disk is full")], "the disk is full"),
        ([AssistantMessage(text="  STEP FAILED")], "STEP FAILED"),
        (
            [AssistantMessage(tool_calls=[CALL]), result(False), AssistantMessage(text="hm")],
            "read_file failed: no file",
        ),
        ([AssistantMessage(tool_calls=[CALL]), result(True), AssistantMessage(text="ok")], None),
        # an earlier failure the model recovered from does not fail the step
        (
            [
                AssistantMessage(tool_calls=[CALL]),
                result(False),
                AssistantMessage(tool_calls=[CALL]),
                result(True),
                AssistantMessage(text="ok"),
            ],
            None,
        ),
    ],
)
def test_step_failure(messages: list[Message], reason: str | None) -> None:
    assert step_failure(messages) == reason


def test_long_failure_reasons_are_cut() -> None:
    reason = step_failure([AssistantMessage(text="STEP FAILED: " + "x" * 1000)])
    assert reason is not None and len(reason) == 300 and reason.endswith("…")


# ------------------------------------------------------------------ progress


PLAN = new_plan([StepSpec("a"), StepSpec("b")])
PLAN_MESSAGE = AssistantMessage(text=render_plan(PLAN), plan=PLAN)


def test_progress_before_a_plan() -> None:
    progress = PlanProgress.of([UserMessage(text="hi")])
    assert progress.plan is None and progress.next_step() is None


def test_progress_walks_steps() -> None:
    own: list[Message] = [UserMessage(text="hi"), PLAN_MESSAGE]
    progress = PlanProgress.of(own)
    assert progress.running is None and progress.next_step() == PLAN.steps[0]

    own.append(UserMessage(text="do a", step=1))
    own.append(AssistantMessage(tool_calls=[CALL]))
    progress = PlanProgress.of(own)
    assert (progress.running, progress.running_since) == (1, 2)
    assert progress.statuses == {1: "running", 2: "pending"}

    own += [result(True), AssistantMessage(text="a is done")]
    progress = PlanProgress.of(own)
    assert progress.running is None and progress.failed is None
    assert progress.statuses == {1: "done", 2: "pending"}
    assert progress.next_step() == PLAN.steps[1]

    own += [UserMessage(text="do b", step=2), AssistantMessage(text="b is done")]
    progress = PlanProgress.of(own)
    assert progress.next_step() is None
    assert progress.result() == "a is done\n\nb is done"


def test_progress_after_a_failure_and_its_revision() -> None:
    own: list[Message] = [
        PLAN_MESSAGE,
        UserMessage(text="do a", step=1),
        AssistantMessage(text="STEP FAILED: no"),
    ]
    progress = PlanProgress.of(own)
    assert (progress.failed, progress.failure) == (1, "no")
    assert progress.statuses[1] == "failed"

    current = Plan(steps=[PLAN.steps[0].model_copy(update={"status": "failed"}), PLAN.steps[1]])
    revision = revised_plan(current, 1, "step 1 failed: no", [StepSpec("c")])
    own.append(AssistantMessage(text=render_plan(revision), plan=revision))
    progress = PlanProgress.of(own)
    assert progress.failed is None
    assert progress.statuses == {1: "failed", 2: "skipped", 3: "pending"}
    assert progress.next_step() is not None and progress.next_step() == revision.steps[2]
