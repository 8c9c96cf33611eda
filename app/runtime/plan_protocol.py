"""Plan mode's pure parts: the plan schema and its validation, the texts the model is given, a
step's outcome, and the run's plan progress as read off its stored messages.

The model answers a plan request with JSON `{"steps": [{"description", "tools"}]}` (`plan_schema`:
1 to `MAX_STEPS` steps, tool names from the agent's tools). `parse_plan` accepts it bare or in a
code fence and raises `PlanInvalidError` with a message fit to send back to the model.

Progress (`PlanProgress.of`) is derived from the run's own messages, so a resumed attempt picks up
exactly where the last one stopped: the latest plan message (an `AssistantMessage` with `plan`)
gives the steps; a step instruction (`UserMessage` with `step`) marks a step as running; the
step's answer (the next assistant turn without tool calls) decides its outcome (`step_failure`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from app.core.events import PlanOutline
from app.core.transcript import AssistantMessage, Plan, PlanStep, ToolResult, UserMessage
from app.llm.base import Message, ToolSpec

MAX_STEPS = 20
MAX_DESCRIPTION_CHARS = 2000
MAX_REVISIONS = 3
"""Plan revisions per run; a step that fails after that fails the run (`plan_step_failed`)."""
FAILED_MARKER = "STEP FAILED"
"""A step answer starting with this (any case) reports the step as failed."""
REASON_MAX = 300

_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```$", re.DOTALL)


class PlanInvalidError(ValueError):
    """The model's plan does not parse or does not match the schema."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class StepSpec:
    """A step as the model proposed it."""

    description: str
    tools: tuple[str, ...] = ()


def plan_schema(tool_names: Sequence[str]) -> dict[str, Any]:
    """The JSON schema of a plan answer; `tools` items must name one of `tool_names`."""
    tools: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
    if tool_names:
        tools["items"] = {"type": "string", "enum": sorted(set(tool_names))}
    else:
        tools["maxItems"] = 0
    step = {
        "type": "object",
        "properties": {
            "description": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_DESCRIPTION_CHARS,
                "pattern": r"\S",
            },
            "tools": tools,
        },
        "required": ["description", "tools"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "steps": {"type": "array", "minItems": 1, "maxItems": MAX_STEPS, "items": step}
        },
        "required": ["steps"],
        "additionalProperties": False,
    }


def _path(error: jsonschema.ValidationError) -> str:
    out = ""
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(the answer)"


def parse_plan(text: str, tool_names: Sequence[str]) -> list[StepSpec]:
    """The steps of a plan answer; `PlanInvalidError` says what is wrong."""
    body = text.strip()
    if fenced := _FENCE.match(body):
        body = fenced.group(1).strip()
    if not body:
        raise PlanInvalidError("the answer is empty; expected a JSON object")
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise PlanInvalidError(f"the answer is not valid JSON ({exc})") from None
    validator = jsonschema.Draft202012Validator(plan_schema(tool_names))
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise PlanInvalidError(f"{_path(first)}: {first.message}{more}")
    return [
        StepSpec(description=s["description"].strip(), tools=tuple(dict.fromkeys(s["tools"])))
        for s in value["steps"]
    ]


def new_plan(steps: Sequence[StepSpec]) -> Plan:
    """A first plan: the steps, numbered from 1, all pending."""
    return Plan(steps=_numbered(steps, 1))


def revised_plan(plan: Plan, failed: int, reason: str, steps: Sequence[StepSpec]) -> Plan:
    """`plan` with step `failed` failed, its pending steps skipped and `steps` appended."""
    kept = [
        s.model_copy(update={"status": "failed"})
        if s.index == failed
        else s.model_copy(update={"status": "skipped"})
        if s.status in ("pending", "running")
        else s
        for s in plan.steps
    ]
    start = max((s.index for s in plan.steps), default=0) + 1
    return Plan(steps=[*kept, *_numbered(steps, start)], revision=plan.revision + 1, reason=reason)


def _numbered(steps: Sequence[StepSpec], start: int) -> list[PlanStep]:
    return [
        PlanStep(index=start + i, description=s.description, tools=list(s.tools))
        for i, s in enumerate(steps)
    ]


def plan_outline(plan: Plan) -> PlanOutline:
    """The plan's steps, as events carry them."""
    return PlanOutline(steps=list(plan.steps))


def render_plan(plan: Plan) -> str:
    """The plan as text: what models see of a stored plan message."""
    title = "Plan:" if plan.revision == 0 else f"Revised plan ({plan.reason}):"
    lines = [title]
    for s in plan.steps:
        tools = f" [tools: {', '.join(s.tools)}]" if s.tools else ""
        status = "" if s.status == "pending" else f" ({s.status})"
        lines.append(f"{s.index}. {s.description}{tools}{status}")
    return "\n".join(lines)


# ------------------------------------------------------------------ what the model is told


def _tool_list(tools: Sequence[ToolSpec]) -> str:
    if not tools:
        return "none (every step's `tools` must be [])"
    return "; ".join(f"{t.name}: {t.description}" for t in tools)


def plan_request(tools: Sequence[ToolSpec], schema: dict[str, Any]) -> str:
    """The instruction asking for a plan of the latest request."""
    return (
        "Before acting on the request above, plan it. Reply with only a JSON object matching "
        f"this JSON schema, and nothing else:\n{json.dumps(schema)}\n"
        "Give a few concrete steps, in order. For each step, `description` says what to do and "
        "`tools` names the tools it is expected to use ([] for none). "
        f"Available tools: {_tool_list(tools)}."
    )


def revision_request(plan: Plan, failed: int, reason: str) -> str:
    """The instruction asking for a revised plan after step `failed` failed."""
    return (
        f"Step {failed} of the plan failed: {reason}\nThe plan so far:\n{render_plan(plan)}\n"
        "Reply with only a JSON object matching the same schema, listing the steps still needed "
        "to reach the goal; they replace the steps that have not run yet."
    )


def reask(error: str) -> str:
    """The instruction after an invalid plan."""
    return (
        f"That reply is not a valid plan: {error}. Reply again with only a JSON object matching "
        "the schema."
    )


def step_instruction(step: PlanStep) -> str:
    """The stored instruction that starts a step."""
    tools = f" Expected tools: {', '.join(step.tools)}." if step.tools else ""
    return (
        f"Carry out step {step.index} of the plan: {step.description}.{tools} When the step is "
        "done, reply with a short summary of what you did. If it cannot be done, reply starting "
        f"with {FAILED_MARKER} and say why."
    )


# ------------------------------------------------------------------ outcomes and progress


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= REASON_MAX else flat[: REASON_MAX - 1] + "…"


def step_failure(step_messages: Sequence[Message]) -> str | None:
    """Why a finished step failed (None: it is done), from its messages after the instruction.

    The last message is the step's answer. The step failed if the answer starts with
    `STEP FAILED`, or if the tool calls just before it (the last batch) had a failure.
    """
    answer = step_messages[-1]
    assert isinstance(answer, AssistantMessage)
    if answer.text.lstrip().upper().startswith(FAILED_MARKER):
        return _short(answer.text.lstrip()[len(FAILED_MARKER) :].lstrip(" :-") or FAILED_MARKER)
    batch: list[ToolResult] = []
    for m in reversed(step_messages[:-1]):
        if not isinstance(m, ToolResult):
            break
        batch.append(m)
    failed = [r for r in reversed(batch) if not r.ok]
    if failed:
        return _short("; ".join(f"{r.name} failed: {r.error or 'unknown error'}" for r in failed))
    return None


@dataclass(slots=True)
class PlanProgress:
    """Where a plan-mode run stands, derived from its own messages."""

    plan: Plan | None = None
    """The latest stored plan (statuses as they were when it was stored)."""
    statuses: dict[int, str] = field(default_factory=dict)
    """Each step's status now."""
    running: int | None = None
    """The step whose instruction is stored but whose answer is not."""
    running_since: int = 0
    """Position of the running step's instruction in the run's messages."""
    failed: int | None = None
    """A step that failed after the latest plan was stored (it needs a revision)."""
    failure: str = ""
    answers: dict[int, str] = field(default_factory=dict)
    """The answers of finished steps."""

    @classmethod
    def of(cls, own: Sequence[Message]) -> PlanProgress:
        """Replay the run's messages."""
        progress = cls()
        for position, m in enumerate(own):
            if isinstance(m, AssistantMessage) and m.plan is not None:
                progress.plan = m.plan
                progress.statuses = {s.index: s.status for s in m.plan.steps}
                progress.running, progress.failed = None, None
            elif isinstance(m, UserMessage) and m.step is not None:
                progress.running, progress.running_since = m.step, position
                progress.statuses[m.step] = "running"
            elif isinstance(m, AssistantMessage) and not m.tool_calls and progress.running:
                step = progress.running
                reason = step_failure(own[progress.running_since + 1 : position + 1])
                progress.statuses[step] = "done" if reason is None else "failed"
                progress.answers[step] = m.text
                if reason is not None:
                    progress.failed, progress.failure = step, reason
                progress.running = None
        return progress

    def next_step(self) -> PlanStep | None:
        """The first step still pending."""
        if self.plan is None:
            return None
        return next((s for s in self.plan.steps if self.statuses.get(s.index) == "pending"), None)

    def result(self) -> str:
        """The run's final answer: the answers of the done steps, in order."""
        done = [i for i, status in sorted(self.statuses.items()) if status == "done"]
        return "\n\n".join(self.answers[i] for i in done if i in self.answers)
