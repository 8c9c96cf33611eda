"""The tool-execution phase: run the pending calls of the latest assistant message, in order.

Before a call runs it passes the run's policy (`app/tools/guard.py`): an unknown, denied or
owner-only tool, a call past a per-turn or per-run cap, or invalid arguments are refused — stored
as a failed result the model reads, never a run failure. Then the approval gate: a call the
policy wants approved runs only with an `approved` decision or a `trustSeconds` grant; a denied
or expired one is refused ("denied by <user>: <reason>"); an undecided one raises
`AwaitingApproval`, which `execute_run` lets through and the worker turns into a parked run
(`LeasedRun.park_for_approval`). On resumption the same call comes back here and finds its
decision.

Each executed call is recorded as started (`tool.started`, a `tool_executions` row) before it
runs and its result is stored with its `tool.completed`/`tool.failed` event in one transaction
after, so a result that was stored is never executed again. A call a previous attempt started
but never finished (the worker died) has an unknown outcome: it is re-run only if the tool is
idempotent; otherwise it is recorded as failed and the model is told why.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import structlog

from app.core.transcript import AssistantMessage, ToolCall, ToolResult
from app.db.models import ToolApproval
from app.runtime.run_state import RunState
from app.tools.approvals import (
    EXPIRED_REASON,
    ApprovalRequest,
    AwaitingApproval,
    approval_for_call,
    insert_trusted,
    mark_expired,
    refusal_of,
    resolved_event,
)
from app.tools.base import Tool, ToolContext
from app.tools.guard import CallGuard
from app.tools.policy_store import resolve_run_policy
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
        policy = await resolve_run_policy(s, agent_id=run.agent_id, user_id=run.user_id)
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
        result = await _execute_one(state, ctx, guard, call)
        state.record(result)
        results.append(result)
    return results


async def _execute_one(
    state: RunState, ctx: ToolContext, guard: CallGuard, call: ToolCall
) -> ToolResult:
    leased = state.leased
    turn_call, run_call = call_positions(state, call)
    if (refusal := guard.refusal(call, turn_call=turn_call, run_call=run_call)) is not None:
        return await leased.tool_refused(call, refusal)
    approval_id = None
    tool = guard.tool(call)
    if tool is not None and (reason := guard.approval_reason(call)) is not None:
        gate = await approval_gate(state, call, tool, reason)
        approval_id = gate.approval_id
        if gate.refusal is not None:
            return await leased.tool_refused(call, gate.refusal, approval_id=approval_id)
    attempt = await leased.tool_started(call, approval_id=approval_id)
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
    return result


@dataclass(frozen=True, slots=True)
class Gate:
    """The approval gate's answer: the approval that covers the call, and a refusal if denied."""

    approval_id: UUID
    refusal: str | None = None


async def approval_gate(state: RunState, call: ToolCall, tool: Tool, reason: str) -> Gate:
    """Let an approval-requiring call through, refuse it, or raise `AwaitingApproval`."""
    leased = state.leased
    run = leased.run
    async with leased.db.tenant(run.principal) as s:
        approval = await approval_for_call(s, run.id, call.id)
    if approval is not None and approval.status == "pending":
        if approval.expires_at > datetime.now(UTC):
            raise AwaitingApproval(ApprovalRequest.of(approval))  # parked again, same approval
        approval = await _expire(state, call, approval.id)
    if approval is not None:
        return Gate(approval.id, refusal_of(approval))
    request = ApprovalRequest(
        approval_id=uuid4(),
        tool_call_id=call.id,
        tool=call.name,
        args=call.args,
        risk=tool.risk,
        reason=reason,
        expires_at=datetime.now(UTC) + timedelta(seconds=state.settings.approval_ttl_seconds),
    )
    async with leased.write() as w:
        await insert_trusted(w.session, run, request)  # or AwaitingApproval: no grant covers it
    return Gate(request.approval_id)


class _AlreadyDecided(Exception):
    """Rolls back an expiry that lost the race against a decision."""


async def _expire(state: RunState, call: ToolCall, approval_id: UUID) -> ToolApproval | None:
    """Expire the call's overdue approval (with `approval.resolved`); the approval afterwards."""
    leased = state.leased
    try:
        async with leased.write(
            [resolved_event(approval_id, "expired", None, reason=EXPIRED_REASON)]
        ) as w:
            if not await mark_expired(w.session, approval_id):
                raise _AlreadyDecided
    except _AlreadyDecided:
        pass
    async with leased.db.tenant(leased.run.principal) as s:
        return await approval_for_call(s, leased.run.id, call.id)
