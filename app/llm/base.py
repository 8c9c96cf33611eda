"""The `Model` interface every provider implements, and the small types it speaks.

A model call is one `ModelRequest` (system prompt, transcript, tool specs) answered by a stream of
`ModelEvent`s: text chunks, tool calls and (once, usually last) token usage. The stream simply
ends when the model's turn is over. Providers translate their failures into `ModelError`; the loop
ends the run `failed` with the error's code and message.

Providers that talk to a network service also yield:

* `ThinkingDelta`: the model's reasoning, shown to clients but never part of the transcript;
* `RetryNotice`: a transient failure is about to be retried after `delay_seconds`;
* `StreamReset`: everything streamed so far in this call is void (the stream broke after partial
  output and is retried from the start), so consumers drop their partial text and tool calls.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from app.core.events import ModelRetryEvent
from app.core.transcript import Message as Message  # one transcript entry, as models see it
from app.core.transcript import ToolCall, dump_message


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
    response_schema: dict[str, Any] | None = None
    """A JSON schema the answer's text must match (structured output), or None for free text.

    Providers that support structured output should enforce it (Gemini: `response_mime_type=
    "application/json"` + `response_json_schema`; OpenAI: `response_format={"type":
    "json_schema", ...}`); others may ignore it: the caller parses the text as JSON (code fences
    stripped) and validates it anyway.
    """
    purpose: Literal["chat", "plan", "compact", "flush"] = "chat"
    """Why the call is made: `chat` (a normal turn), `plan` (asking for a plan, see
    `app.runtime.plan_protocol`), `compact` (summarising older messages) or `flush` (offering the
    `memory_store` tool before a compaction; see `app.runtime.compaction`); providers may use it
    for logging or routing."""


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


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    """A chunk of the model's reasoning ("thought summary"), in order; not transcript text."""

    text: str


@dataclass(frozen=True, slots=True)
class RetryNotice:
    """Attempt `attempt` failed transiently; the provider retries after `delay_seconds`."""

    attempt: int
    delay_seconds: float
    reason: str

    def event(self) -> ModelRetryEvent:
        """The `model.retry` run event that tells clients about it."""
        return ModelRetryEvent(
            attempt=self.attempt, delay_seconds=self.delay_seconds, reason=self.reason
        )


@dataclass(frozen=True, slots=True)
class StreamReset:
    """Discard everything this call streamed so far: the provider starts the answer again."""


ModelEvent = TextDelta | ToolCallEvent | Usage | ThinkingDelta | RetryNotice | StreamReset
"""What a model stream yields."""


class ModelError(Exception):
    """A model call failed; `code` is machine-readable (`model_error`, `model_unavailable`, …)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.streamed = False
        """The failed call had already streamed part of an answer to clients (set by the
        runtime, so that a fallback to another model tells clients to drop it)."""


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

    async def count_tokens(self, request: ModelRequest) -> int:
        """How many input tokens `request` is, as this model counts them.

        The default is an estimate, `ceil(characters / 4)` of the system prompt, the transcript
        (as stored JSON) and the tool specs (as JSON); providers with a token-counting endpoint
        override it.
        """
        return estimate_request_tokens(request)


@asynccontextmanager
async def closing_stream(
    stream: AsyncIterator[ModelEvent],
) -> AsyncIterator[AsyncIterator[ModelEvent]]:
    """Close a model's stream (an async generator) however the call that reads it ends."""
    try:
        yield stream
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


def estimate_request_tokens(request: ModelRequest) -> int:
    """`ceil(characters / 4)` of the request's system prompt, transcript JSON and tool JSON."""
    messages = json.dumps([dump_message(m) for m in request.messages])
    tools = json.dumps([[t.name, t.description, t.parameters] for t in request.tools])
    return math.ceil((len(request.system_prompt) + len(messages) + len(tools)) / 4)
