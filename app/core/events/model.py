"""What a model call streams: answer text, reasoning, restarts and retries, the complete message,
and the tokens it used."""

from __future__ import annotations

from typing import Literal

from app.core.events.base import EventBase
from app.core.events.names import (
    ASSISTANT_DELTA,
    ASSISTANT_MESSAGE,
    ASSISTANT_RESET,
    MODEL_RETRY,
    THINKING_DELTA,
    USAGE,
)
from app.core.transcript import ToolCall


class AssistantDeltaEvent(EventBase):
    """A chunk of the answer as it streams."""

    type: Literal["assistant.delta"] = ASSISTANT_DELTA
    text: str
    """The chunk (append it to the turn's text)."""


class ThinkingDeltaEvent(EventBase):
    """A chunk of the model's reasoning summary; shown to clients, never in the transcript."""

    type: Literal["thinking.delta"] = THINKING_DELTA
    text: str
    """The chunk."""


class AssistantResetEvent(EventBase):
    """The model call restarted: drop this turn's partial text and thinking streamed so far."""

    type: Literal["assistant.reset"] = ASSISTANT_RESET


class ModelRetryEvent(EventBase):
    """A model call failed transiently and is retried."""

    type: Literal["model.retry"] = MODEL_RETRY
    attempt: int
    """The attempt that failed (1, 2, …)."""
    delay_seconds: float
    """The wait before the next attempt."""
    reason: str
    """What failed (e.g. `429 rate limited`)."""


class AssistantMessageEvent(EventBase):
    """The complete assistant message of a model turn (stored in the transcript with it)."""

    type: Literal["assistant.message"] = ASSISTANT_MESSAGE
    text: str
    """The turn's whole text."""
    tool_calls: list[ToolCall]
    """The tool calls the model made (`id`, `name`, `args`), as the transcript stores them."""


class UsageEvent(EventBase):
    """The tokens of one model call."""

    type: Literal["usage"] = USAGE
    input_tokens: int
    """Input tokens, as the provider reported them."""
    output_tokens: int
    """Output tokens, as the provider reported them."""
