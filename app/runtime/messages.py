"""Transcript entries: one tagged union, stored as `session_messages.payload` and exported as JSONL."""

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


class UserMessage(_Model):
    """What the user posted."""

    kind: Literal["user"] = "user"
    text: str


class AssistantMessage(_Model):
    """One model turn: text and/or tool calls."""

    kind: Literal["assistant"] = "assistant"
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)


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
