"""The model-turn phase: one streamed model call, persisted.

Text chunks are stored as `assistant.delta` events as they arrive (reasoning as
`thinking.delta`, retries of the call as `model.retry`), coalesced: deferred to the run's next
write or the worker's next flush, a few tens of milliseconds later (`app.queue.coalesce`), so a
streamed answer costs a commit per flush interval, not per chunk; the complete assistant message (text and
tool calls) is appended to the transcript together with its `assistant.message` event (and any
events the caller derives from the message, e.g. a plan step's outcome) and the call's token
usage (added to the run with a `usage` event) in one transaction; then the usage is checked
against the run's token budget. When the provider restarts its answer (`StreamReset`) the partial turn is dropped
and `assistant.reset` tells clients to drop its deltas too. A `ModelError` propagates (nothing of
the failed turn is stored but the deltas already streamed).

The context comes from the compaction phase (`compaction.prepare_context`), which compacts it
first when it would not fit the model's window; a provider that still rejects it as too long
(`model_context_too_long`) gets one forced compaction and one retry.

A call that fails in a way another model can fix moves the run to the next of the agent's
`fallbackModels` (`model_fallback`) and the turn is made again there: its context prepared again
for that model's window, from the stored transcript.

The state machine goes `thinking` when the call starts, `responding` at its first text chunk,
and back to `thinking` when a restarted answer voids the text. `stream_turn` is also used for
calls whose text is not streamed to clients (plan requests, `app.runtime.plan_mode`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from app.core.events import (
    AssistantDeltaEvent,
    AssistantMessageEvent,
    AssistantResetEvent,
    RunEvent,
    ThinkingDeltaEvent,
)
from app.core.state_machine import RESPONDING, THINKING
from app.core.transcript import AssistantMessage, ToolCall
from app.llm.base import (
    ModelError,
    ModelRequest,
    RetryNotice,
    StreamReset,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    Usage,
    closing_stream,
)
from app.llm.failures import CONTEXT_TOO_LONG
from app.observability import metrics, tracing
from app.runtime.compaction import PreparedContext, prepare_context
from app.runtime.limits import check_tenant_budget
from app.runtime.model_fallback import fall_back, with_fallback
from app.runtime.run_state import RunFailed, RunState
from app.runtime.transcript_store import insert_messages
from app.runtime.usage import usage_stored, usage_write

ExtraEvents = Callable[[AssistantMessage], Sequence[RunEvent]]
"""Events to store together with a turn's message, derived from it."""


@dataclass(slots=True)
class Turn:
    """What the model streamed in one call."""

    text: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None


async def run_model_turn(
    state: RunState, extra_events: ExtraEvents | None = None
) -> AssistantMessage:
    """Call the model on the current context (falling back to the next model where that helps);
    store and return its message."""
    while True:
        await state.transition(THINKING)
        try:
            turn, context = await _fitted_turn(state)
            break
        except (ModelError, RunFailed) as exc:
            await fall_back(state, exc)  # re-raises what another model cannot fix
    message = AssistantMessage(
        text="".join(turn.text),
        tool_calls=unique_tool_call_ids(turn.calls, state.tool_call_ids()),
    )
    events: list[RunEvent] = [
        AssistantMessageEvent(text=message.text, tool_calls=list(message.tool_calls))
    ]
    if extra_events is not None:
        events.extend(extra_events(message))
    usage = usage_write(state, turn.usage, context_estimate=context.estimate)
    if usage is not None:
        events.append(usage.event)
    async with state.leased.write(events) as w:
        await insert_messages(w, [message])
        if usage is not None:
            await usage.rows(w)
    state.record(message)
    usage_stored(state, turn.usage, context_estimate=context.estimate)
    return message


async def _fitted_turn(state: RunState) -> tuple[Turn, PreparedContext]:
    """One call of the run's current model on the context fitted to its window (compacted once
    more if the provider says it is too long)."""
    system_prompt, tools = state.agent.system_prompt, state.tools.specs()
    context = await prepare_context(state, system_prompt=system_prompt, tools=tools)
    try:
        turn = await call_model(
            state, ModelRequest(system_prompt, messages=context.messages, tools=tools)
        )
    except ModelError as exc:
        if exc.code != CONTEXT_TOO_LONG or context.compacted:
            raise
        context = await prepare_context(state, system_prompt=system_prompt, tools=tools, force=True)
        if not context.compacted:
            raise
        turn = await call_model(
            state, ModelRequest(system_prompt, messages=context.messages, tools=tools)
        )
    return turn, context


async def stream_turn(state: RunState, request: ModelRequest, *, stream_text: bool = True) -> Turn:
    """`call_model`, made again on the next fallback model where that helps (`model_fallback`)."""
    return await with_fallback(state, lambda: call_model(state, request, stream_text=stream_text))


async def call_model(state: RunState, request: ModelRequest, *, stream_text: bool = True) -> Turn:
    """The call, to the run's current model. With `stream_text`, each text chunk is stored as an
    `assistant.delta` as it arrives (and the first one moves the state to `responding`);
    without, text is only collected."""
    assert state.model is not None, "the model is resolved before the first turn"
    await check_tenant_budget(state)
    provider, model = metrics.provider_of(state.model.name)
    began = time.perf_counter()
    with tracing.model_span(provider, model) as span:
        try:
            turn = await _stream(state, request, stream_text=stream_text)
        except ModelError as exc:
            tracing.set_error(span, exc.code)
            metrics.observe_model_call(state.model.name, time.perf_counter() - began, ok=False)
            raise
        usage = turn.usage or Usage(input_tokens=0, output_tokens=0)
        tracing.set_usage(span, usage.input_tokens, usage.output_tokens)
    metrics.observe_model_call(
        state.model.name,
        time.perf_counter() - began,
        ok=True,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
    )
    return turn


async def _stream(state: RunState, request: ModelRequest, *, stream_text: bool) -> Turn:
    assert state.model is not None
    turn = Turn()
    shown = False  # clients were sent part of this answer (deltas not voided by a reset)
    try:
        async with closing_stream(state.model.stream(request)) as stream:
            async for event in stream:
                if isinstance(event, TextDelta) and event.text:
                    if stream_text and not turn.text:
                        await state.transition(RESPONDING)
                    turn.text.append(event.text)
                    if stream_text:
                        state.leased.defer([AssistantDeltaEvent(text=event.text)])
                        shown = True
                elif isinstance(event, ToolCallEvent):
                    turn.calls.append(event.call)
                elif isinstance(event, Usage):
                    turn.usage = event
                elif isinstance(event, ThinkingDelta) and event.text:
                    state.leased.defer([ThinkingDeltaEvent(text=event.text)])
                    shown = True
                elif isinstance(event, RetryNotice):
                    state.leased.defer([event.event()])
                elif isinstance(event, StreamReset):
                    turn, shown = Turn(), False
                    state.leased.defer([AssistantResetEvent()])
                    if stream_text:
                        await state.transition(THINKING)
    except ModelError as exc:
        exc.streamed = shown
        raise
    return turn


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
