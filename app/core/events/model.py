"""What a model call streams: answer text, reasoning, restarts, retries and fallbacks to another
model, the complete message, and the tokens it used."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.core.events.base import EventBase, unset
from app.core.events.names import (
    ASSISTANT_DELTA,
    ASSISTANT_MESSAGE,
    ASSISTANT_RESET,
    MODEL_FALLBACK,
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


class ModelFallbackEvent(EventBase):
    """The run's model failed in a way another model can fix (down, rate limited, overloaded,
    model not found, context too long, key refused): the run goes on with the next model of its
    agent's `fallbackModels`, from the stored transcript. Drop any partial answer of the failed
    call (an `assistant.reset` comes first when there was one)."""

    type: Literal["model.fallback"] = MODEL_FALLBACK
    from_: str = Field(alias="from")
    """The model that failed (or, when a model is not configured here, was passed over)."""
    to: str
    """The model the run goes on with (for the rest of this attempt)."""
    reason: str
    """The failure's code: `model_unavailable_transient`, `model_rate_limited`,
    `model_not_found`, `model_context_too_long`, `context_overflow`, `model_auth_failed` or
    `model_unavailable`."""
    message: str
    """The failure in the provider's words (never a key)."""


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
    model: str | None = Field(default=None, exclude_if=unset)
    """The model that made the call (omitted when unset: events stored before it existed)."""
