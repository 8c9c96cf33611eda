"""Model calls nobody watches stream: a compaction's summary requests and a memory flush.

Their text is not the assistant's answer, so it is collected, not streamed; only their retries
(`model.retry`) and usage are recorded. (Conversation turns stream: `model_turn`.) They go to the
run's current model and fall back like conversation turns (`model_fallback`): a summary that
meets the outage first moves the run, so the turn after it does not wait for the same retries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.core.transcript import ToolCall
from app.llm.base import (
    ModelRequest,
    RetryNotice,
    StreamReset,
    TextDelta,
    ToolCallEvent,
    Usage,
    closing_stream,
)
from app.runtime.limits import check_tenant_budget
from app.runtime.model_fallback import with_fallback
from app.runtime.run_state import RunState
from app.runtime.usage import record_usage


@dataclass(slots=True)
class Collected:
    """The text and tool calls of a call that was not streamed to clients."""

    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)


async def collect(state: RunState, request: ModelRequest) -> Collected:
    """Make a call whose text clients do not see; its retries and usage are still recorded."""
    return await with_fallback(state, lambda: _collect(state, request))


async def _collect(state: RunState, request: ModelRequest) -> Collected:
    assert state.model is not None, "the model is resolved before the first call"
    await check_tenant_budget(state)
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
                await state.leased.emit(event.event())
            elif isinstance(event, StreamReset):
                out, usage = Collected(), None
    await record_usage(state, usage)
    return out
