"""The approval gate of tool calls, runtime side: whether a call that needs an approval may run,
is refused, or must wait; and parking the run while it waits (`park_for_approval`).

A call the policy wants approved runs only with an `approved` decision or a `trustSeconds` grant
(`app.tools.approvals.covers`); a denied or expired one is refused; an undecided one raises
`AwaitingApproval`. The worker then parks the run: the pending `tool_approvals` row, the call's
`tool_executions` row (`awaiting_approval`), status `awaiting_approval` with the lease cleared and
`approval.required`, in one fenced transaction (`LeasedRun.park`). An overdue pending approval
is expired here, lazily, with `approval.resolved`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

from app.core.transcript import ToolCall
from app.db.models import ToolApproval
from app.queue.lease import FencedWrite, LeasedRun
from app.runtime.run_state import RunState
from app.runtime.tool_records import upsert_execution
from app.tools.approval_rules import Approver
from app.tools.approvals import (
    EXPIRED_REASON,
    ApprovalRequest,
    AwaitingApproval,
    approval_for_call,
    insert_pending,
    insert_trusted,
    mark_expired,
    refusal_of,
    resolved_event,
)
from app.tools.base import Tool


@dataclass(frozen=True, slots=True)
class Gate:
    """The approval gate's answer: the approval that covers the call, and a refusal if denied."""

    approval_id: UUID
    refusal: str | None = None


async def approval_gate(
    state: RunState, call: ToolCall, tool: Tool, reason: str, approver: Approver | None = None
) -> Gate:
    """Let an approval-requiring call through, refuse it, or raise `AwaitingApproval`.

    `approver`: who may decide a new approval (stored with it, so a later policy change does
    not loosen it)."""
    approver = approver or Approver()
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
        approver_role=approver.role,
        allow_self_approval=approver.allow_self,
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
            [resolved_event(approval_id, "expired", None, EXPIRED_REASON)]
        ) as w:
            if not await mark_expired(w.session, approval_id):
                raise _AlreadyDecided
    except _AlreadyDecided:
        pass
    async with leased.db.tenant(leased.run.principal) as s:
        return await approval_for_call(s, leased.run.id, call.id)


async def park_for_approval(leased: LeasedRun, request: ApprovalRequest) -> bool:
    """Park the run until `request` is decided: the pending approval, the call's execution row
    `awaiting_approval`, status `awaiting_approval` with the lease cleared, and
    `approval.required`, atomically. False (nothing changed): a cancel was requested first."""

    async def rows(w: FencedWrite) -> None:
        await insert_pending(w.session, w.run, request)
        call = ToolCall(id=request.tool_call_id, name=request.tool, args=request.args)
        await upsert_execution(
            w, call, {"status": "awaiting_approval"}, approval_id=request.approval_id
        )

    return await leased.park(request.event(), rows)
