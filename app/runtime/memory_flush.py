"""The memory flush: before older messages are compacted away, the model may keep what matters.

One call (`purpose="flush"`) shows the model the part of the transcript about to be summarised,
with `memory_store` as its only tool. Its `memory_store` calls are executed like any tool call
(policy-checked, validated, recorded in `tool_executions`, streamed as `tool.*` events with
`purpose: "memory_flush"`) but stored outside the transcript: they are housekeeping, not part of
the conversation. `memory.flushed` then marks the rows as offered (`agent_sessions.
memory_flushed_through_seq`): a row is offered once, even if the compaction after it fails and
a later one covers it again (that one offers only the rows added since).

A flush is skipped when the setting is off, when the agent's policy does not give it
`memory_store`, or when every `memory_store` call needs an approval (a rule on the tool or its
risk: a flush cannot wait for a human). Under an argument rule it is offered, and each call the
rule gates is refused (recorded as failed). A flush that fails (the model errs) is logged and
streamed; the compaction goes on without it.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from app.core.events import EventError, MemoryFlushedEvent
from app.core.transcript import ToolCall, ToolResult, UserMessage
from app.llm.base import ModelError, ModelRequest
from app.runtime.compaction_store import mark_flushed
from app.runtime.context import ContextItem, trim_text
from app.runtime.run_state import RunState
from app.runtime.side_calls import collect
from app.runtime.summaries import (
    FLUSH_SYSTEM_PROMPT,
    REQUEST_OVERHEAD_TOKENS,
    flush_request,
    render_items,
)
from app.runtime.tool_execution import call_guard, tool_context
from app.runtime.tool_records import tool_finished, tool_started
from app.tools.approval_rules import gated_argument

log = structlog.get_logger(__name__)

FLUSH_TOOL = "memory_store"
MAX_FLUSH_CALLS = 8
PURPOSE = "memory_flush"


async def flush_memory(state: RunState, covered: Sequence[ContextItem], through_seq: int) -> None:
    """Offer `memory_store` for the rows of `covered` (up to `through_seq`) not offered yet."""
    tool = state.tools.get(FLUSH_TOOL)
    fresh = [i for i in covered if not i.summary and i.seq > state.flushed_through]
    if not state.settings.memory_flush_on_compaction or tool is None or not fresh:
        return
    guard = await call_guard(state)
    # A rule on the tool or its risk holds for any call: then the flush is not offered at all.
    # Argument rules depend on the call: those are checked call by call below.
    probe = ToolCall(id="flush-probe", name=FLUSH_TOOL, args={"content": "x"})
    reason = guard.approval_reason(probe)
    if reason is not None and gated_argument(reason) is None:
        log.info("memory flush skipped: memory_store needs approval", run_id=str(state.run_id))
        return
    _, blocks = render_items(fresh)
    room_tokens = max(250, int(state.window.budget / state.token_ratio) - REQUEST_OVERHEAD_TOKENS)
    transcript = trim_text("\n".join(blocks), room_tokens * 4)
    request = ModelRequest(
        system_prompt=FLUSH_SYSTEM_PROMPT,
        messages=[UserMessage(text=flush_request([transcript]))],
        tools=[tool.spec()],
        purpose="flush",
    )
    error = None
    stored = failed = 0
    try:
        answer = await collect(state, request)
    except ModelError as exc:
        log.warning("memory flush failed", run_id=str(state.run_id), reason=exc.message)
        error = EventError(code=exc.code, message=exc.message)
    else:
        ctx = tool_context(state)
        for i, proposed in enumerate(answer.calls[:MAX_FLUSH_CALLS]):
            call = proposed.model_copy(update={"id": f"flush_{through_seq}_{i}"})
            refusal = None
            if call.name != FLUSH_TOOL:
                refusal = f"only {FLUSH_TOOL} may be called during a memory flush"
            elif (problem := guard.refusal(call, turn_call=1, run_call=1)) is not None:
                refusal = problem
            elif guard.approval_reason(call) is not None:
                refusal = "this call needs an approval, which a memory flush cannot wait for"
            await tool_started(state.leased, call, purpose=PURPOSE)
            if refusal is not None:
                result = ToolResult(tool_call_id=call.id, name=call.name, ok=False, error=refusal)
            else:
                result = await state.tools.execute(ctx, call)
            await tool_finished(state.leased, result, in_transcript=False, purpose=PURPOSE)
            stored, failed = (stored + 1, failed) if result.ok else (stored, failed + 1)
    outcome = MemoryFlushedEvent(through_seq=through_seq, error=error, stored=stored, failed=failed)
    await mark_flushed(state.leased, through_seq, outcome)
    state.flushed_through = through_seq
