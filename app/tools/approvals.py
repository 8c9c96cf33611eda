"""Approval gates of tool calls: the request, the exception that parks a run, worker-side rows.

When the policy says a call needs approval (`approval_rules.py`) and neither a decision nor a
`trustSeconds` grant covers it, the tool-execution phase raises `AwaitingApproval`. `execute_run`
does not catch it; the worker parks the run (`app.runtime.approval_gate.park_for_approval`: the pending
`tool_approvals` row, status `awaiting_approval`, lease cleared and `approval.required`, in one
fenced transaction) and frees its slot; the run keeps its session's lane. A decision
(`approval_store.py`) queues the run again at the head of its lane; whichever worker claims it
runs the same call again through the gate, which now finds the decision.

The `tool_approvals` row is the audit record: who decided what, when and why. Calls approved
through a trust grant get an `approved` row too (`decided_by` = who granted the trust).

What a `trustSeconds` grant covers (`covers`): later calls in the same session, until it expires,
of the same tool whose approval reason is the same — the same rule of the same policy layer —
and, when that rule is an argument rule (e.g. shell commands outside an allowlist), with the same
value of the gated argument. Approving `rm -rf build` with trust therefore approves that exact
command again, never `curl … | sh`; approving a call gated by "high-risk tool" or by a tool
pattern approves the tool's calls that need approval for that same reason, whatever their
arguments. A call that needs approval for another reason asks again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.principal import Principal
from app.core.events import ApprovalRequiredEvent, ApprovalResolvedEvent
from app.db.models import ToolApproval, ToolTrust
from app.queue.manager import ClaimedRun
from app.tools.approval_rules import gated_argument

EXPIRED_REASON = "expired: no decision before the deadline"


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A call that waits for a decision (becomes a pending `tool_approvals` row)."""

    approval_id: UUID
    tool_call_id: str
    tool: str
    args: dict[str, Any]
    risk: str
    reason: str
    expires_at: datetime
    approver_role: str | None = None
    """Who may decide (`admin`, `owner`; None: anyone who sees it)."""
    allow_self_approval: bool = True
    """False: not the run's own user."""

    def event(self) -> ApprovalRequiredEvent:
        """The `approval.required` event."""
        return ApprovalRequiredEvent(
            approval_id=self.approval_id,
            tool_call_id=self.tool_call_id,
            tool=self.tool,
            args=self.args,
            risk=self.risk,
            reason=self.reason,
            expires_at=self.expires_at,
        )

    @classmethod
    def of(cls, row: ToolApproval) -> ApprovalRequest:
        """The request of a stored (pending) approval."""
        return cls(
            approval_id=row.id,
            tool_call_id=row.tool_call_id,
            tool=row.tool,
            args=row.args,
            risk=row.risk,
            reason=row.reason,
            expires_at=row.expires_at,
            approver_role=row.approver_role,
            allow_self_approval=row.allow_self_approval,
        )


class AwaitingApproval(Exception):  # noqa: N818  (a control-flow signal, not an error)
    """The run must wait for a decision on `request`: the worker parks it (not a failure)."""

    def __init__(self, request: ApprovalRequest) -> None:
        super().__init__(f"tool call {request.tool_call_id} awaits approval")
        self.request = request


def resolved_event(
    approval_id: UUID,
    decision: Literal["approve", "deny", "expired"],
    decided_by: str | None,
    reason: str | None = None,
    *,
    trust_seconds: int | None = None,
) -> ApprovalResolvedEvent:
    """The `approval.resolved` event (`reason` and `trust_seconds` are left out when unset)."""
    return ApprovalResolvedEvent(
        approval_id=approval_id,
        decision=decision,
        decided_by=decided_by,
        reason=reason,
        trust_seconds=trust_seconds,
    )


def refusal_of(row: ToolApproval) -> str | None:
    """What the model is told about a decided call (None: approved, run it)."""
    if row.status == "approved":
        return None
    if row.status == "denied":
        return f"denied by {row.decided_by}: {row.decision_reason or 'no reason given'}"
    return f"approval {row.decision_reason or EXPIRED_REASON}; the call was not executed"


async def approval_for_call(
    s: AsyncSession, run_id: UUID, tool_call_id: str
) -> ToolApproval | None:
    """The approval row of a call, if there is one."""
    row: ToolApproval | None = await s.scalar(
        select(ToolApproval).where(
            ToolApproval.run_id == run_id, ToolApproval.tool_call_id == tool_call_id
        )
    )
    return row


def covers(granted: ToolApproval, tool: str, reason: str, args: Mapping[str, Any]) -> bool:
    """Whether a trust grant given on the approval `granted` covers a call of `tool` with `args`
    that needs approval for `reason` (see the module docstring)."""
    if granted.tool != tool or granted.reason != reason:
        return False
    arg = gated_argument(reason)
    return arg is None or _value(granted.args, arg) == _value(args, arg)


def _value(args: Mapping[str, Any], arg: str) -> tuple[bool, Any]:
    """An argument's value, telling a missing argument from a null one."""
    return arg in args, args.get(arg)


async def _grants(s: AsyncSession, session_id: UUID) -> list[tuple[ToolTrust, ToolApproval]]:
    """The session's unexpired grants with the approvals they were given on, latest expiry first
    (a grant without its approval covers nothing)."""
    rows = await s.execute(
        select(ToolTrust, ToolApproval)
        .join(ToolApproval, ToolApproval.id == ToolTrust.approval_id)
        .where(ToolTrust.session_id == session_id, ToolTrust.expires_at > func.now())
        .order_by(ToolTrust.expires_at.desc(), ToolTrust.id)
    )
    return [(grant, granted) for grant, granted in rows]


async def covering_trust(
    s: AsyncSession, session_id: UUID, request: ApprovalRequest
) -> ToolTrust | None:
    """An unexpired grant of the session that covers the call of `request` (`covers`)."""
    return next(
        (
            grant
            for grant, granted in await _grants(s, session_id)
            if covers(granted, request.tool, request.reason, request.args)
        ),
        None,
    )


def _approval_row(run: ClaimedRun, request: ApprovalRequest) -> dict[str, Any]:
    """The columns every approval row of `request` has."""
    return {
        "id": request.approval_id,
        "tenant_id": run.tenant_id,
        "run_id": run.id,
        "session_id": run.session_id,
        "tool_call_id": request.tool_call_id,
        "tool": request.tool,
        "args": request.args,
        "risk": request.risk,
        "reason": request.reason,
        "expires_at": request.expires_at,
        "approver_role": request.approver_role,
        "allow_self_approval": request.allow_self_approval,
    }


async def insert_pending(s: AsyncSession, run: ClaimedRun, request: ApprovalRequest) -> None:
    """Store the pending approval (a retry of the same call keeps the existing row)."""
    await s.execute(
        insert(ToolApproval)
        .values(**_approval_row(run, request))
        .on_conflict_do_nothing(constraint="tool_approvals_run_call_key")
    )


async def insert_trusted(s: AsyncSession, run: ClaimedRun, request: ApprovalRequest) -> UUID:
    """Record a call approved by a trust grant (the audit row); returns its id.

    The call is recorded under a grant of the session that covers its reason and arguments
    (`covering_trust`, in this transaction). When none does it raises `AwaitingApproval` for
    `request`: the call waits for a human like one without any grant.
    """
    grant = await covering_trust(s, run.session_id, request)
    if grant is None:
        raise AwaitingApproval(request)
    await s.execute(
        insert(ToolApproval)
        .values(
            **_approval_row(run, request),
            status="approved",
            decided_by=grant.granted_by,
            decided_at=func.now(),
            decision_reason=f"trusted until {grant.expires_at.isoformat()} "
            f"(approval {grant.approval_id})",
        )
        .on_conflict_do_nothing(constraint="tool_approvals_run_call_key")
    )
    return request.approval_id


async def mark_expired(s: AsyncSession, approval_id: UUID, reason: str = EXPIRED_REASON) -> bool:
    """Expire a pending approval; whether it was still pending."""
    done = await s.scalar(
        update(ToolApproval)
        .where(ToolApproval.id == approval_id, ToolApproval.status == "pending")
        .values(status="expired", decided_at=func.now(), decision_reason=reason)
        .returning(ToolApproval.id)
    )
    return done is not None


def decision_refusal(
    approver_role: str | None,
    allow_self_approval: bool,
    reason: str,
    run_user_id: str,
    principal: Principal,
) -> str | None:
    """Why `principal` may not decide an approval (None: they may), naming its rule (`reason`).

    The approval stores its rule's `approverRole`/`allowSelfApproval` when it is created, so a
    policy edited while it waits changes nothing about who may decide it.
    """
    if approver_role == "owner" and principal.role != "owner":
        return (
            f"only a tenant owner may decide this approval (rule: {reason}, approverRole "
            f"'owner'); your role is {principal.role!r}"
        )
    if approver_role == "admin" and not principal.is_admin:
        return (
            f"only a tenant owner or admin may decide this approval (rule: {reason}, "
            f"approverRole 'admin'); your role is {principal.role!r}"
        )
    if not allow_self_approval and principal.user_id == run_user_id:
        return (
            f"the run's own user may not decide this approval (rule: {reason}, "
            "allowSelfApproval false); ask another member with the right role"
        )
    return None
