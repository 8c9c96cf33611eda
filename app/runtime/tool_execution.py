"""The tool-execution phase: run the pending calls of the latest assistant message, in order.

Each call is recorded as started (`tool.started`, a `tool_executions` row) before it runs and
its result is stored with its `tool.completed`/`tool.failed` event in one transaction after, so a
result that was stored is never executed again. A call a previous attempt started but never
finished (the worker died) has an unknown outcome: it is re-run only if the tool is idempotent;
otherwise it is recorded as failed and the model is told why.
"""

from __future__ import annotations

import structlog

from app.runtime.messages import ToolCall, ToolResult
from app.runtime.state import RunState
from app.tools.base import ToolContext

log = structlog.get_logger(__name__)

TOOL_CALLING = "tool_calling"
INTERRUPTED = "interrupted by a worker failure; outcome unknown, not re-run"


def tool_context(state: RunState) -> ToolContext:
    """What the run's tools get to use."""
    run = state.leased.run
    return ToolContext(
        db=state.leased.db,
        principal=run.principal,
        session_id=run.session_id,
        run_id=run.id,
        settings=state.settings,
    )


async def execute_tool_calls(state: RunState, calls: list[ToolCall]) -> list[ToolResult]:
    """Execute `calls` one after another, storing each result as soon as it is known."""
    leased = state.leased
    await leased.set_state(TOOL_CALLING)
    ctx = tool_context(state)
    results: list[ToolResult] = []
    for call in calls:
        attempt = await leased.tool_started(call)
        if attempt.interrupted and not state.tools.is_idempotent(call.name):
            log.warning(
                "not re-running an interrupted tool call",
                run_id=str(state.run_id),
                tool=call.name,
                tool_call_id=call.id,
            )
            result = ToolResult(tool_call_id=call.id, name=call.name, ok=False, error=INTERRUPTED)
            await leased.tool_finished(result, interrupted=True)
        else:
            result = await state.tools.execute(ctx, call)
            await leased.tool_finished(result)
        state.record(result)
        results.append(result)
    return results
