"""The tool-execution phase: run the pending calls of the latest assistant message, in order.

Before a call runs it passes the run's policy (`app/tools/guard.py`): an unknown, denied or
owner-only tool, a call past a per-turn or per-run cap, or invalid arguments are refused — stored
as a failed result the model reads, never a run failure. Then the approval gate
(`approval_gate`): a call the policy wants approved runs only with an `approved` decision or a
`trustSeconds` grant; a denied or expired one is refused ("denied by <user>: <reason>"); an
undecided one raises `AwaitingApproval`, which `execute_run` lets through and the worker turns
into a parked run (`approval_gate.park_for_approval`). On resumption the same call comes back
here and finds its decision.

Each executed call is recorded (`tool_records`) as started (`tool.started`, a `tool_executions`
row) before it runs and its result is stored with its `tool.completed`/`tool.failed` event in
one transaction after, so a result that was stored is never executed again. A call a previous
attempt started but never finished (the worker died) has an unknown outcome: it is re-run only
if the tool is idempotent; otherwise it is recorded as failed and the model is told why. A call
not yet started when a user's steering message arrives is skipped (`inbox`): its stored result
says so, and the model reads the message next.
"""

from __future__ import annotations

import time

import structlog

from app.core.failpoints import TOOL_AFTER_RUN, failpoint
from app.core.transcript import AssistantMessage, ToolCall, ToolResult
from app.observability import metrics, tracing
from app.runtime.approval_gate import approval_gate
from app.runtime.inbox import SKIPPED_FOR_MESSAGE, steer_waiting
from app.runtime.run_state import RunState
from app.runtime.tool_records import tool_finished, tool_refused, tool_started
from app.tools.base import AwaitingArrival, ToolContext
from app.tools.guard import CallGuard
from app.tools.policy_store import resolve_lineage_policy
from app.tools.registry import PolicyToolRegistry

log = structlog.get_logger(__name__)

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


async def call_guard(state: RunState) -> CallGuard:
    """The run's guard: the policy its registry was filtered by, else the stored policy."""
    if isinstance(state.tools, PolicyToolRegistry):
        return CallGuard.of(state.tools, state.tools.policy)
    run = state.leased.run
    async with state.leased.db.tenant(run.principal) as s:
        policy = await resolve_lineage_policy(
            s, run_id=run.id, agent_id=run.agent_id, user_id=run.user_id
        )
    return CallGuard.of(state.tools, policy)


def call_positions(state: RunState, call: ToolCall) -> tuple[int, int]:
    """The call's 1-based position among its model turn's calls and among the run's calls."""
    before = 0
    for message in state.own():
        if isinstance(message, AssistantMessage) and message.tool_calls:
            ids = [c.id for c in message.tool_calls]
            if call.id in ids:
                return ids.index(call.id) + 1, before + ids.index(call.id) + 1
            before += len(ids)
    return 1, before + 1


async def execute_tool_calls(state: RunState, calls: list[ToolCall]) -> list[ToolResult]:
    """Execute `calls` one after another, storing each result as soon as it is known.

    Raises `AwaitingApproval` when a call must wait for a decision (the results of the calls
    before it are stored). The caller moves the state machine (`conversation.run_tools`).
    """
    ctx = tool_context(state)
    guard = await call_guard(state)
    results: list[ToolResult] = []
    for call in calls:
        if state.skipped_calls or await steer_waiting(state):
            result = await tool_refused(state.leased, call, SKIPPED_FOR_MESSAGE)
            metrics.observe_tool_call(tool_label(state, call), "skipped")
            state.skipped_calls += 1
        else:
            result = await _execute_one(state, ctx, guard, call)
        state.record(result)
        results.append(result)
    return results


async def _execute_one(
    state: RunState, ctx: ToolContext, guard: CallGuard, call: ToolCall
) -> ToolResult:
    leased = state.leased
    label = tool_label(state, call)
    turn_call, run_call = call_positions(state, call)
    if (refusal := guard.refusal(call, turn_call=turn_call, run_call=run_call)) is not None:
        metrics.observe_tool_call(label, "refused")
        return await tool_refused(leased, call, refusal)
    approval_id = None
    tool = guard.tool(call)
    if tool is not None and (reason := guard.approval_reason(call)) is not None:
        gate = await approval_gate(state, call, tool, reason, guard.approver(call))
        approval_id = gate.approval_id
        if gate.refusal is not None:
            metrics.observe_tool_call(label, "refused")
            return await tool_refused(leased, call, gate.refusal, approval_id=approval_id)
    attempt = await tool_started(leased, call, approval_id=approval_id)
    if attempt.interrupted and not state.tools.is_idempotent(call.name):
        log.warning(
            "not re-running an interrupted tool call",
            run_id=str(state.run_id),
            tool=call.name,
            tool_call_id=call.id,
        )
        result = ToolResult(tool_call_id=call.id, name=call.name, ok=False, error=INTERRUPTED)
        await tool_finished(leased, result, interrupted=True)
        metrics.observe_tool_call(label, "interrupted")
    else:
        began = time.perf_counter()
        with tracing.tool_span(label, call.id, parks=(AwaitingArrival,)) as span:
            result = await state.tools.execute(ctx, call)
            if not result.ok:
                tracing.set_error(span, "tool_error")
        metrics.observe_tool_call(
            label, "ok" if result.ok else "error", time.perf_counter() - began
        )
        failpoint(TOOL_AFTER_RUN)
        await tool_finished(leased, result)
    return result


def tool_label(state: RunState, call: ToolCall) -> str:
    """The call's tool as a metric label and span name: a name of the run's catalog, else
    `other` (a model may call any name)."""
    return metrics.bounded("tool", call.name, state.tools.names())
