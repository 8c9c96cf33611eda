"""Approvals: list them, read one, decide one (approve/deny, optionally trusting the tool)."""

from __future__ import annotations

from typing import Annotated, Literal, cast
from uuid import UUID

from fastapi import APIRouter, Path, Query

from app.api.deps import CurrentPrincipal, DatabaseDep, JsonBody
from app.api.schemas import error_responses
from app.api.tool_schemas import (
    ApprovalDecisionBody,
    ApprovalInfo,
    ApprovalPage,
    ApprovalStatus,
)
from app.auth.principal import Principal
from app.tools.approval_store import (
    Decision,
    ListedApproval,
    decide,
    get_approval,
    list_approvals,
)
from app.tools.approvals import decision_refusal

router = APIRouter(prefix="/api/agent-runtime/approvals", tags=["approvals"])

ApprovalIdPath = Annotated[UUID, Path(alias="approvalId", description="The approval's id.")]


def approval_info(listed: ListedApproval, principal: Principal) -> ApprovalInfo:
    """The API view of a `tool_approvals` row, as `principal` sees it (`canDecide`)."""
    row = listed.row
    refusal = decision_refusal(
        row.approver_role, row.allow_self_approval, row.reason, listed.run_user_id, principal
    )
    return ApprovalInfo(
        approval_id=row.id,
        run_id=row.run_id,
        tool_call_id=row.tool_call_id,
        tool=row.tool,
        args=row.args,
        risk=row.risk,
        reason=row.reason,
        status=cast(ApprovalStatus, row.status),
        decided_by=row.decided_by,
        decided_at=row.decided_at,
        decision_reason=row.decision_reason,
        trust_seconds=row.trust_seconds,
        expires_at=row.expires_at,
        created_at=row.created_at,
        approver_role=cast(Literal["admin", "owner"] | None, row.approver_role),
        allow_self_approval=row.allow_self_approval,
        can_decide=row.status == "pending" and refusal is None,
    )


@router.get("", response_model=ApprovalPage, responses=error_responses(401, 422))
async def get_approvals(
    principal: CurrentPrincipal,
    db: DatabaseDep,
    run_id: Annotated[UUID | None, Query(alias="runId", description="One run's.")] = None,
    status: Annotated[ApprovalStatus | None, Query(description="Only this status.")] = None,
    limit: Annotated[int, Query(ge=1, le=500, description="At most this many.")] = 100,
) -> ApprovalPage:
    """The approvals the caller may see, newest first (e.g. `?status=pending`, `?runId=`): a
    member's own runs', all of the tenant's for owners and admins."""
    rows = await list_approvals(db, principal, run_id=run_id, status=status, limit=limit)
    return ApprovalPage(approvals=[approval_info(r, principal) for r in rows])


@router.get("/{approvalId}", response_model=ApprovalInfo, responses=error_responses(401, 404))
async def get_one(
    principal: CurrentPrincipal, db: DatabaseDep, approval_id: ApprovalIdPath
) -> ApprovalInfo:
    """One approval and its outcome."""
    return approval_info(await get_approval(db, principal, approval_id), principal)


@router.post(
    "/{approvalId}",
    response_model=ApprovalInfo,
    responses=error_responses(400, 401, 403, 404, 409, 415, 422),
)
async def post_decision(
    principal: CurrentPrincipal,
    db: DatabaseDep,
    approval_id: ApprovalIdPath,
    _json: JsonBody,
    body: ApprovalDecisionBody,
) -> ApprovalInfo:
    """Approve or deny a pending tool call; its run resumes on any worker. 403
    `forbidden_approver` when the rule that required it names another `approverRole` or forbids
    self-approval."""
    decision = Decision(body.decision, trust_seconds=body.trust_seconds, reason=body.reason)
    return approval_info(await decide(db, principal, approval_id, decision), principal)
