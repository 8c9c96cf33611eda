"""The offline model's plan-mode rules (see `app.llm.offline`): plan answers and plan steps.

Directive lines of the user's message (the latest one that has any):

* `/plan STEP; STEP; …`: the steps of the plan. A step is a description optionally followed by
  inline tool calls, `write it /tool write_file {"path": "a", "content": "x"}` (several `/tool`s
  allowed; the JSON must not contain `;`, which separates steps). The plan lists each step's
  tool names;
* `/replan STEP; …`: the steps of every revised plan (default: one step, `Wrap up`);
* `/plan-invalid`: every plan answer is malformed JSON (so the run fails `plan_invalid`);
* `/plan-invalid-once`: the first answer of each plan request is malformed, the re-ask is valid.

Without `/plan`, a plan is one step, `Answer the request`.

Carrying out step N (the latest user message is the runtime's step instruction, `step` set): the
step's inline tool calls are made (found by its description among the `/plan` and `/replan`
steps), then it answers `Step N done: <description>` — or `Step N failed: <description>` when a
tool failed — followed by one summary line per tool result; a step without tools answers
`Step N done: <description>` at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.transcript import AssistantMessage, ToolResult, UserMessage
from app.llm.base import Message

MALFORMED_PLAN = '{"steps": [{"description": "an unfinished plan"'
DEFAULT_STEP = "Answer the request"
DEFAULT_REVISION_STEP = "Wrap up"
_PLAN_LINE = re.compile(r"^/(plan|replan)\s+(.+)$")
_INLINE_TOOL = re.compile(r"(?:^|\s+)/tool\s+")
_INVALID = "/plan-invalid"
_INVALID_ONCE = "/plan-invalid-once"

ArgsParser = Callable[[str | None], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class OfflineStep:
    """A step as written in a `/plan` or `/replan` line."""

    description: str
    calls: tuple[tuple[str, dict[str, Any], str], ...] = ()
    """(tool name, args, the `/tool …` text) per inline call."""


@dataclass(slots=True)
class PlanDirectives:
    """The plan-mode directives of one message."""

    plan: list[OfflineStep] = field(default_factory=list)
    replan: list[OfflineStep] = field(default_factory=list)
    invalid: bool = False
    invalid_once: bool = False

    @property
    def any(self) -> bool:
        """Whether the message has any plan directive."""
        return bool(self.plan or self.replan or self.invalid or self.invalid_once)


def parse_steps(text: str, parse_args: ArgsParser) -> list[OfflineStep]:
    """`a /tool x {...}; b` → the steps (empty segments dropped)."""
    steps: list[OfflineStep] = []
    for segment in text.split(";"):
        parts = _INLINE_TOOL.split(segment.strip())
        description, calls = parts[0].strip(), []
        for raw in parts[1:]:
            name, _, args = raw.strip().partition(" ")
            if name:
                calls.append((name, parse_args(args), f"/tool {raw.strip()}"))
        if not description and calls:
            description = "Use " + ", ".join(dict.fromkeys(c[0] for c in calls))
        if description:
            steps.append(OfflineStep(description=description, calls=tuple(calls)))
    return steps


def parse_plan_directives(text: str, parse_args: ArgsParser) -> PlanDirectives:
    """The `/plan`, `/replan`, `/plan-invalid` and `/plan-invalid-once` lines of `text`."""
    found = PlanDirectives()
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if line == _INVALID:
            found.invalid = True
        elif line == _INVALID_ONCE:
            found.invalid_once = True
        elif m := _PLAN_LINE.match(line):
            steps = parse_steps(m.group(2), parse_args)
            (found.plan if m.group(1) == "plan" else found.replan).extend(steps)
    return found


def plan_source(messages: Sequence[Message], parse_args: ArgsParser) -> tuple[int, PlanDirectives]:
    """The latest user message (not a step instruction) with plan directives: its position and
    directives; (-1, no directives) when there is none."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, UserMessage) and m.step is None:
            directives = parse_plan_directives(m.text, parse_args)
            if directives.any:
                return i, directives
    return -1, PlanDirectives()


def plan_answer(messages: Sequence[Message], parse_args: ArgsParser) -> str:
    """The answer to a plan request: plan JSON (or, as directed, malformed JSON)."""
    position, directives = plan_source(messages, parse_args)
    later = messages[position + 1 :]
    reasked = any(isinstance(m, AssistantMessage) and m.text == MALFORMED_PLAN for m in later)
    if directives.invalid or (directives.invalid_once and not reasked):
        return MALFORMED_PLAN
    revising = any(isinstance(m, AssistantMessage) and m.plan is not None for m in later)
    if revising:
        steps = directives.replan or [OfflineStep(DEFAULT_REVISION_STEP)]
    else:
        steps = directives.plan or [OfflineStep(DEFAULT_STEP)]
    return json.dumps(
        {
            "steps": [
                {"description": s.description, "tools": list(dict.fromkeys(c[0] for c in s.calls))}
                for s in steps
            ]
        }
    )


@dataclass(frozen=True, slots=True)
class StepTurn:
    """What to do on a turn of plan step `index`."""

    index: int
    description: str
    position: int
    """Position of the step's instruction in the request's messages."""
    calls: tuple[tuple[str, dict[str, Any], str], ...]


def step_turn(messages: Sequence[Message], parse_args: ArgsParser) -> StepTurn | None:
    """The step being carried out, if the latest user message is a step instruction."""
    position = next(
        (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], UserMessage)),
        -1,
    )
    instruction = messages[position] if position >= 0 else None
    if not isinstance(instruction, UserMessage) or instruction.step is None:
        return None
    index = instruction.step
    plan = next(
        (
            m.plan
            for m in reversed(messages[:position])
            if isinstance(m, AssistantMessage) and m.plan is not None
        ),
        None,
    )
    step = next((s for s in plan.steps if s.index == index), None) if plan else None
    description = step.description if step is not None else f"step {index}"
    _, directives = plan_source(messages, parse_args)
    written = [s for s in directives.plan + directives.replan if s.description == description]
    return StepTurn(index, description, position, written[0].calls if written else ())


def step_summary(turn: StepTurn, results: Sequence[ToolResult], lines: list[str]) -> str:
    """The step's answer after its tool results."""
    verdict = "done" if all(r.ok for r in results) else "failed"
    return "\n".join([f"Step {turn.index} {verdict}: {turn.description}", *lines])
