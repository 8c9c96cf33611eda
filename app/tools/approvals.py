"""Approval gates of tool calls: the request, the exception that parks a run, worker-side rows.

When the policy says a call needs approval (`approval_rules.py`) and neither a decision nor a
`trustSeconds` grant covers it, the tool-execution phase raises `AwaitingApproval`. `execute_run`
does not catch it; the worker parks the run (`LeasedRun.park_for_approval`: the pending
`tool_approvals` row, status `awaiting_approval`, lease cleared and `approval.required`, in one
fenced transaction) and frees its slot; the run keeps its session's lane. A decision
(`approval_store.py`) queues the run again at the head of its lane; whichever worker claims it
runs the same call again through the gate, which now finds the decision.

The `tool_approvals` row is the audit record: who decided what, when and why. Calls approved
through a trust grant get an `approved` row too (`decided_by` = who granted the trust).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any
from uuid import UUID

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import ToolApproval, ToolTrust
from app.queue.events import EventSpec
from app.queue.manager import ClaimedRun
from app.runtime import events as ev

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

    def event_data(self) -> dict[str, Any]:
        """The `approval.required` event."""
        return {
            "approvalId": str(self.approval_id),
            "toolCallId": self.tool_call_id,
            "tool": self.tool,
            "args": self.args,
            "risk": self.risk,
            "reason": self.reason,
            "expiresAt": self.expires_at.isoformat(),
        }

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
        )


class AwaitingApproval(Exception):  # noqa: N818  (a control-flow signal, not an error)
    """The run must wait for a decision on `request`: the worker parks it (not a failure)."""

    def __init__(self, request: ApprovalRequest) -> None:
        super().__init__(f"tool call {request.tool_call_id} awaits approval")
        self.request = request


def resolved_event(
    approval_id: UUID, decision: str, decided_by: str | None, **extra: Any
) -> EventSpec:
    """The `approval.resolved` event (`decision`: approve, deny or expired)."""
    data = {"approvalId": str(approval_id), "decision": decision, "decidedBy": decided_by}
    return (ev.APPROVAL_RESOLVED, {**data, **{k: v for k, v in extra.items() if v is not None}})


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


async def trust_for(s: AsyncSession, session_id: UUID, tool: str) -> ToolTrust | None:
    """An unexpired trust grant of the session covering `tool` (latest expiry first)."""
    grants = await s.scalars(
        select(ToolTrust)
        .where(ToolTrust.session_id == session_id, ToolTrust.expires_at > func.now())
        .order_by(ToolTrust.expires_at.desc())
    )
    return next((g for g in grants if fnmatchcase(tool, g.tool)), None)


async def insert_pending(s: AsyncSession, run: ClaimedRun, request: ApprovalRequest) -> None:
    """Store the pending approval (a retry of the same call keeps the existing row)."""
    await s.execute(
        insert(ToolApproval)
        .values(
            id=request.approval_id,
            tenant_id=run.tenant_id,
            run_id=run.id,
            session_id=run.session_id,
            tool_call_id=request.tool_call_id,
            tool=request.tool,
            args=request.args,
            risk=request.risk,
            reason=request.reason,
            expires_at=request.expires_at,
        )
        .on_conflict_do_nothing(constraint="tool_approvals_run_call_key")
    )


async def insert_trusted(
    s: AsyncSession, run: ClaimedRun, request: ApprovalRequest, trust: ToolTrust
) -> UUID:
    """Record a call approved by a trust grant (the audit row); returns its id."""
    await s.execute(
        insert(ToolApproval)
        .values(
            id=request.approval_id,
            tenant_id=run.tenant_id,
            run_id=run.id,
            session_id=run.session_id,
            tool_call_id=request.tool_call_id,
            tool=request.tool,
            args=request.args,
            risk=request.risk,
            reason=request.reason,
            status="approved",
            decided_by=trust.granted_by,
            decided_at=func.now(),
            decision_reason=f"trusted until {trust.expires_at.isoformat()} "
            f"(approval {trust.approval_id})",
            expires_at=request.expires_at,
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
