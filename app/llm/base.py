"""The `Model` interface every provider implements, and the small types it speaks.

A model call is one `ModelRequest` (system prompt, transcript, tool specs) answered by a stream of
`ModelEvent`s: text chunks, tool calls and (once, usually last) token usage. The stream simply
ends when the model's turn is over. Providers translate their failures into `ModelError`; the loop
ends the run `failed` with the error's code and message.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.runtime.messages import AssistantMessage, ToolCall, ToolResult, UserMessage

Message = UserMessage | AssistantMessage | ToolResult
"""One transcript entry, as the model sees it."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as offered to the model: name, description and JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything one model call sees."""

    system_prompt: str
    messages: Sequence[Message]
    tools: Sequence[ToolSpec] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A chunk of the assistant's text, in order."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallEvent:
    """A complete tool call the model wants executed."""

    call: ToolCall


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens the call consumed (reported by the provider, or estimated by it)."""

    input_tokens: int
    output_tokens: int


ModelEvent = TextDelta | ToolCallEvent | Usage
"""What a model stream yields."""


class ModelError(Exception):
    """A model call failed; `code` is machine-readable (`model_error`, `model_unavailable`, …)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Model(ABC):
    """A language model provider. Implementations keep client, auth and quirks to themselves."""

    name: str
    """The name the model was resolved by (stored nowhere; for logs and errors)."""

    @abstractmethod
    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Answer `request` as a stream of events; raise `ModelError` on failure.

        Implement as an async generator (`async def stream(...): ... yield ...`). Consumers close
        it (`contextlib.aclosing`) so cancellation and early exits release provider resources.
        """
