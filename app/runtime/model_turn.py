"""The model-turn phase: one streamed model call, persisted.

Text chunks are stored as `assistant.delta` events as they arrive (reasoning as
`thinking.delta`, retries of the call as `model.retry`); the complete assistant message (text and
tool calls) is appended to the transcript together with its `assistant.message` event in one
transaction; then the call's token usage is added to the run with a `usage` event. When the
provider restarts its answer (`StreamReset`) the partial turn is dropped and `assistant.reset`
tells clients to drop its deltas too. A `ModelError` propagates (nothing of the failed turn is
stored but the deltas already streamed).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from app.llm.base import (
    ModelEvent,
    ModelRequest,
    RetryNotice,
    StreamReset,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    Usage,
)
from app.runtime import events as ev
from app.runtime.context import build_context
from app.runtime.messages import AssistantMessage, ToolCall
from app.runtime.state import RunState

THINKING = "thinking"
RESPONDING = "responding"


@dataclass(slots=True)
class _Turn:
    """What the model streamed in one call."""

    text: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None


async def run_model_turn(state: RunState) -> AssistantMessage:
    """Call the model on the current context; store and return its message."""
    await state.leased.set_state(THINKING)
    turn = await _stream(state)
    message = AssistantMessage(
        text="".join(turn.text),
        tool_calls=unique_tool_call_ids(turn.calls, state.tool_call_ids()),
    )
    tool_calls = [c.model_dump(mode="json", by_alias=True) for c in message.tool_calls]
    await state.leased.append(
        [message], events=[(ev.ASSISTANT_MESSAGE, {"text": message.text, "toolCalls": tool_calls})]
    )
    state.record(message)
    if turn.usage is not None:
        usage = {"inputTokens": turn.usage.input_tokens, "outputTokens": turn.usage.output_tokens}
        await state.leased.add_usage(
            turn.usage.input_tokens, turn.usage.output_tokens, events=[(ev.USAGE, usage)]
        )
    return message


async def _stream(state: RunState) -> _Turn:
    """The streaming call: each text chunk is stored as an `assistant.delta` as it arrives."""
    assert state.model is not None, "the model is resolved before the first turn"
    request = ModelRequest(
        system_prompt=state.agent.system_prompt,
        messages=build_context(state.transcript),
        tools=state.tools.specs(),
    )
    turn = _Turn()
    async with _closing(state.model.stream(request)) as stream:
        async for event in stream:
            if isinstance(event, TextDelta) and event.text:
                if not turn.text:
                    await state.leased.set_state(RESPONDING)
                turn.text.append(event.text)
                await state.leased.emit(ev.ASSISTANT_DELTA, {"text": event.text})
            elif isinstance(event, ToolCallEvent):
                turn.calls.append(event.call)
            elif isinstance(event, Usage):
                turn.usage = event
            elif isinstance(event, ThinkingDelta) and event.text:
                await state.leased.emit(ev.THINKING_DELTA, {"text": event.text})
            elif isinstance(event, RetryNotice):
                retry = {"attempt": event.attempt, "delaySeconds": event.delay_seconds}
                await state.leased.emit(ev.MODEL_RETRY, {**retry, "reason": event.reason})
            elif isinstance(event, StreamReset):
                turn = _Turn()
                await state.leased.emit(ev.ASSISTANT_RESET, {})
    return turn


@asynccontextmanager
async def _closing(
    stream: AsyncIterator[ModelEvent],
) -> AsyncIterator[AsyncIterator[ModelEvent]]:
    """Close the provider's stream (an async generator) however the turn ends."""
    try:
        yield stream
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


def unique_tool_call_ids(calls: list[ToolCall], used: set[str]) -> list[ToolCall]:
    """Tool call ids must be unique within a run (the store keys executions by them).

    Some providers reuse ids across turns or send none; such calls get a fresh, unused id.
    """
    taken = set(used)
    unique: list[ToolCall] = []
    for i, call in enumerate(calls):
        new_id = call.id
        n = 0
        while not new_id or new_id in taken:
            n += 1
            new_id = f"{call.id or 'call'}_{len(taken)}_{i}_{n}"
        taken.add(new_id)
        unique.append(call if new_id == call.id else call.model_copy(update={"id": new_id}))
    return unique
