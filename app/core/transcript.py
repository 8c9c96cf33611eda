"""Transcript entries: one tagged union, stored as `session_messages.payload` and exported as JSONL.

Plan mode (`app.runtime.plan_protocol`) adds no kind, so providers and exports need no change: a plan is
an assistant message with `plan` set (its `text` renders the plan), and the runtime's instruction
to carry out a step is a user message with `step` set.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class ToolCall(_Model):
    """A tool call requested by the model."""

    id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


def _absent(value: object) -> bool:
    return value is None


PlanStepStatus = Literal["pending", "running", "done", "failed", "skipped"]
"""A plan step's status: pending → running → done | failed; pending → skipped (replaced by a
revision of the plan)."""


class PlanStep(_Model):
    """One step of a run's plan (plan mode)."""

    index: int
    """1-based position; stable across revisions (a revision appends steps)."""
    description: str
    tools: list[str] = Field(default_factory=list)
    """Names of the tools the step is expected to use."""
    status: PlanStepStatus = "pending"


class Plan(_Model):
    """A run's plan: its steps in order and their statuses when it was stored."""

    steps: list[PlanStep]
    revision: int = 0
    """0: the first plan; n: the n-th revision."""
    reason: str | None = None
    """Why it was revised (the failed step), for revisions."""


class MessageSource(_Model):
    """Where a user-role message that the user did not type in this run comes from."""

    kind: Literal["user", "subagent", "agent"]
    """`user`: the user's message steered into a running run (or queued after it ended);
    `subagent`: a child run's outcome; `agent`: another session's agent (`sessions_send`) or its
    reply."""
    run_id: str | None = Field(default=None, exclude_if=_absent)
    """The run it comes from (a child, a sender, a replying run); omitted when unset."""
    session_key: str | None = Field(default=None, exclude_if=_absent)
    """The session it comes from; omitted when unset."""


class UserMessage(_Model):
    """What the user posted (or, with `step`, the runtime's instruction for one plan step; with
    `source`, a message injected from elsewhere: a steer, a sub-agent's outcome, a reply)."""

    kind: Literal["user"] = "user"
    text: str
    step: int | None = Field(default=None, exclude_if=_absent)
    """Plan mode: this message tells the model to carry out step `step` of the run's plan (it is
    not the user's text, and marks where the step's turns begin). Omitted from JSON when unset."""
    source: MessageSource | None = Field(default=None, exclude_if=_absent)
    """Where the message comes from when it is not this run's own input. Omitted when unset."""


class AssistantMessage(_Model):
    """One model turn: text and/or tool calls."""

    kind: Literal["assistant"] = "assistant"
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    plan: Plan | None = Field(default=None, exclude_if=_absent)
    """Plan mode: this turn is the run's plan (first or revised); `text` is its rendering for
    models, which see only the text. Omitted from JSON when unset."""


class ToolResult(_Model):
    """The outcome of one tool call, fed back to the model on the next turn."""

    kind: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    name: str
    ok: bool
    result: Any = None
    error: str | None = None


Message = Annotated[UserMessage | AssistantMessage | ToolResult, Field(discriminator="kind")]
MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)

ROLE_OF_KIND = {"user": "user", "assistant": "assistant", "tool_result": "tool"}


def role_of(message: UserMessage | AssistantMessage | ToolResult) -> str:
    """The `session_messages.role` of a message."""
    return ROLE_OF_KIND[message.kind]


def dump_message(message: UserMessage | AssistantMessage | ToolResult) -> dict[str, Any]:
    """The JSON payload stored for a message (camelCase, like the HTTP API)."""
    return message.model_dump(mode="json", by_alias=True)


def load_message(payload: dict[str, Any]) -> UserMessage | AssistantMessage | ToolResult:
    """Parse a stored payload back into its message type."""
    return MESSAGE_ADAPTER.validate_python(payload)
