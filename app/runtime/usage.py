"""What every model call of a run shares: closing the provider's stream, recording token usage
(with the calibration of the context estimate), and collecting a call nobody watches stream.

Conversation turns (`model_turn`) stream text to clients; the calls a compaction makes
(`compaction`, `memory_flush`) are collected here instead: their text is not the assistant's
answer, so only their retries (`model.retry`) and usage are streamed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from app.core.transcript import ToolCall
from app.llm.base import (
    ModelEvent,
    ModelRequest,
    RetryNotice,
    StreamReset,
    TextDelta,
    ToolCallEvent,
    Usage,
)
from app.runtime import events as ev
from app.runtime.limits import check_tokens
from app.runtime.run_state import RunState

MIN_TOKEN_RATIO = 0.25
MAX_TOKEN_RATIO = 8.0


@asynccontextmanager
async def closing_stream(
    stream: AsyncIterator[ModelEvent],
) -> AsyncIterator[AsyncIterator[ModelEvent]]:
    """Close the provider's stream (an async generator) however the call ends."""
    try:
        yield stream
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


async def record_usage(
    state: RunState, usage: Usage | None, *, context_estimate: int | None = None
) -> None:
    """Add a call's usage to the run (with a `usage` event); fail the run over its budget.

    `context_estimate`: the call's input was the conversation's context, estimated at this many
    tokens; its reported input tokens become the run's and session's context size and calibrate
    later estimates (`RunState.token_ratio`).
    """
    if usage is None:
        return
    tokens = {"inputTokens": usage.input_tokens, "outputTokens": usage.output_tokens}
    await state.leased.add_usage(
        usage.input_tokens,
        usage.output_tokens,
        events=[(ev.USAGE, tokens)],
        context_window=state.window.window if context_estimate is not None else None,
    )
    if context_estimate and usage.input_tokens > 0:
        ratio = usage.input_tokens / context_estimate
        state.token_ratio = min(MAX_TOKEN_RATIO, max(MIN_TOKEN_RATIO, ratio))
    state.tokens_used += usage.input_tokens + usage.output_tokens
    check_tokens(state)


@dataclass(slots=True)
class Collected:
    """The text and tool calls of a call that was not streamed to clients."""

    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)


async def collect(state: RunState, request: ModelRequest) -> Collected:
    """Make a call whose text clients do not see; its retries and usage are still recorded."""
    assert state.model is not None, "the model is resolved before the first call"
    out = Collected()
    usage = None
    async with closing_stream(state.model.stream(request)) as stream:
        async for event in stream:
            if isinstance(event, TextDelta):
                out.text += event.text
            elif isinstance(event, ToolCallEvent):
                out.calls.append(event.call)
            elif isinstance(event, Usage):
                usage = event
            elif isinstance(event, RetryNotice):
                retry = {"attempt": event.attempt, "delaySeconds": event.delay_seconds}
                await state.leased.emit(ev.MODEL_RETRY, {**retry, "reason": event.reason})
            elif isinstance(event, StreamReset):
                out, usage = Collected(), None
    await record_usage(state, usage)
    return out
