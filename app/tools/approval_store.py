"""Deciding, listing and expiring approvals (API side and the workers' expiry sweep).

A decision locks the run, then the approval; checks the decider against the approval's
`approver_role`/`allow_self_approval` (403); records who decided what and why (on the row and as
an `approval.approved`/`approval.denied` audit event); stores a `trustSeconds` grant (scoped as
`approvals.covers` says); puts a parked run back in the queue at the head of its lane and emits
`approval.resolved`. An approval past its `expires_at` is a deny: it is expired lazily (a
decision attempt, a listing) and by every worker's heartbeat (`sweep_expired_approvals`), which
requeues its run so that the loop feeds the denial back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal
from uuid import UUID

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.audit.record import record_audit
from app.auth.principal import Principal
from app.core.errors import ConflictError, ForbiddenError, NotFoundError
from app.core.state_machine import TERMINAL_STATUSES
from app.db.engine import Database
from app.db.models import Run, ToolApproval, ToolTrust
from app.queue.event_log import emit_unleased
from app.queue.sql import query
from app.tools.approvals import EXPIRED_REASON, decision_refusal, resolved_event

SWEEP_USER = "agent-runtime:approval-expiry"
"""The `sub` of the tenant transactions the expiry sweep opens (shows in no audit field)."""
SWEEP_BATCH = 100
_DECISIONS: dict[str, Literal["approve", "deny", "expired"]] = {
    "approved": "approve",
    "denied": "deny",
    "expired": "expired",
}
"""An approval's status → the `decision` of its `approval.resolved` event."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A human's decision on a pending approval."""

    decision: Literal["approve", "deny"]
    trust_seconds: int = 0
    reason: str | None = None


def _not_found(approval_id: UUID) -> NotFoundError:
    return NotFoundError("approvalId", f"approval {approval_id} not found")


async def _lock(s: AsyncSession, approval_id: UUID) -> tuple[str, ToolApproval] | None:
    """Lock the approval's run, then the approval (the order of the workers' fenced writes,
    which lock the run first); returns the run's status and the approval."""
    run_id = await s.scalar(select(ToolApproval.run_id).where(ToolApproval.id == approval_id))
    if run_id is None:
        return None
    run_status = await s.scalar(select(Run.status).where(Run.id == run_id).with_for_update())
    approval = await s.scalar(
        select(ToolApproval)
        .where(ToolApproval.id == approval_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if run_status is None or approval is None:
        return None
    return run_status, approval


async def decide(
    db: Database, principal: Principal, approval_id: UUID, decision: Decision
) -> ListedApproval:
    """Record `decision` and resume the run. NotFoundError for another tenant's or an unknown
    approval; ConflictError if it was already decided, has expired or its run has finished."""
    conflict: str | None = None
    run_user: str | None = None
    async with db.tenant(principal) as s:
        locked = await _lock(s, approval_id)
        if locked is None:
            raise _not_found(approval_id)
        run_status, approval = locked
        now = await s.scalar(select(func.now()))
        assert now is not None
        run_user = await s.scalar(select(Run.user_id).where(Run.id == approval.run_id))
        if approval.status == "pending":
            refusal = decision_refusal(
                approval.approver_role,
                approval.allow_self_approval,
                approval.reason,
                run_user or "",
                principal,
            )
            if refusal is not None:
                raise ForbiddenError(refusal, code="forbidden_approver", field="approvalId")
        if approval.status != "pending":
            conflict = f"approval {approval_id} is already {approval.status}"
        elif run_status in TERMINAL_STATUSES:
            await _resolve(s, approval, "expired", None, f"run already {run_status}")
            conflict = f"run {approval.run_id} is already {run_status}"
        elif approval.expires_at <= now:
            await _resolve(s, approval, "expired", None, EXPIRED_REASON)
            conflict = f"approval {approval_id} expired at {approval.expires_at.isoformat()}"
        else:
            status = "approved" if decision.decision == "approve" else "denied"
            trust = decision.trust_seconds if status == "approved" else 0
            await _resolve(s, approval, status, principal.user_id, decision.reason, trust)
            await record_audit(
                s,
                principal,
                f"approval.{status}",
                target_type="approval",
                target_id=str(approval.id),
                after={
                    "runId": str(approval.run_id),
                    "tool": approval.tool,
                    "rule": approval.reason,
                    "approverRole": approval.approver_role,
                    "allowSelfApproval": approval.allow_self_approval,
                    "reason": decision.reason,
                    "trustSeconds": trust or None,
                },
            )
            if trust:
                s.add(
                    ToolTrust(
                        tenant_id=principal.tenant_id,
                        session_id=approval.session_id,
                        tool=approval.tool,
                        approval_id=approval.id,
                        granted_by=principal.user_id,
                        expires_at=now + timedelta(seconds=trust),
                    )
                )
        await s.flush()
        await s.refresh(approval)
    if conflict is not None:
        raise ConflictError(conflict)
    return ListedApproval(approval, run_user or "")


async def _resolve(
    s: AsyncSession,
    approval: ToolApproval,
    status: str,
    decided_by: str | None,
    reason: str | None,
    trust_seconds: int = 0,
) -> None:
    """Store the outcome, requeue a parked run and emit `approval.resolved`."""
    await s.execute(
        update(ToolApproval)
        .where(ToolApproval.id == approval.id)
        .values(
            status=status,
            decided_by=decided_by,
            decided_at=func.now(),
            decision_reason=reason,
            trust_seconds=trust_seconds or None,
        )
    )
    await s.execute(query("requeue_parked"), {"run_id": approval.run_id})
    run_status = await s.scalar(select(Run.status).where(Run.id == approval.run_id))
    if run_status in TERMINAL_STATUSES:
        return  # its stream has ended; the row records the outcome
    event = resolved_event(
        approval.id, _DECISIONS[status], decided_by, reason, trust_seconds=trust_seconds or None
    )
    await emit_unleased(s, approval.run_id, approval.tenant_id, [event])


async def expire_overdue(s: AsyncSession, *, run_id: UUID | None = None) -> int:
    """Expire the tenant's overdue pending approvals (of one run, if given); how many."""
    stmt = (
        select(ToolApproval.id)
        .where(ToolApproval.status == "pending", ToolApproval.expires_at <= func.now())
        .order_by(ToolApproval.expires_at)
        .limit(SWEEP_BATCH)
    )
    if run_id is not None:
        stmt = stmt.where(ToolApproval.run_id == run_id)
    expired = 0
    for approval_id in list(await s.scalars(stmt)):
        locked = await _lock(s, approval_id)
        if locked is None or locked[1].status != "pending":
            continue  # decided (or expired by another worker) meanwhile
        await _resolve(s, locked[1], "expired", None, EXPIRED_REASON)
        expired += 1
    return expired


async def sweep_expired_approvals(db: Database) -> int:
    """Expire overdue approvals of every tenant (the worker heartbeat calls this); how many.

    The worker role only finds WHICH tenants have overdue approvals (it may read four columns);
    each tenant's approvals are then expired in a transaction as that tenant, under RLS.
    """
    async with db.queue() as s:
        tenants = list(
            await s.scalars(
                select(ToolApproval.tenant_id)
                .where(ToolApproval.status == "pending", ToolApproval.expires_at <= func.now())
                .distinct()
                .limit(SWEEP_BATCH)
            )
        )
    expired = 0
    for tenant_id in tenants:
        async with db.tenant(
            Principal(user_id=SWEEP_USER, tenant_id=tenant_id, role="service")
        ) as s:
            expired += await expire_overdue(s)
    return expired


@dataclass(frozen=True, slots=True)
class ListedApproval:
    """An approval with the user of its run (who "self" is for `allowSelfApproval`)."""

    row: ToolApproval
    run_user_id: str


async def list_approvals(
    db: Database,
    principal: Principal,
    *,
    run_id: UUID | None = None,
    status: str | None = None,
    limit: int = 100,
) -> list[ListedApproval]:
    """The approvals the caller may see (a member: of their own runs; admins: the tenant's),
    newest first (overdue pending ones are expired first)."""
    async with db.tenant(principal) as s:
        await expire_overdue(s, run_id=run_id)
        stmt = (
            select(ToolApproval, Run.user_id)
            .join(Run, Run.id == ToolApproval.run_id)
            .order_by(ToolApproval.created_at.desc(), ToolApproval.id.desc())
        )
        if run_id is not None:
            stmt = stmt.where(ToolApproval.run_id == run_id)
        if status is not None:
            stmt = stmt.where(ToolApproval.status == status)
        rows = await s.execute(stmt.limit(limit))
        return [ListedApproval(row, user) for row, user in rows]


async def get_approval(db: Database, principal: Principal, approval_id: UUID) -> ListedApproval:
    """One approval the caller may see (expired first if overdue); NotFoundError otherwise."""
    async with db.tenant(principal) as s:
        run_id = await s.scalar(select(ToolApproval.run_id).where(ToolApproval.id == approval_id))
        if run_id is None:
            raise _not_found(approval_id)
        await expire_overdue(s, run_id=run_id)
        approval = await s.get(ToolApproval, approval_id, populate_existing=True)
        run_user = await s.scalar(select(Run.user_id).where(Run.id == run_id))
    assert approval is not None
    return ListedApproval(approval, run_user or "")
