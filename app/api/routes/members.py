"""Members: the users seen in the tenant's tokens and their roles (owners and admins only)."""

from __future__ import annotations

from typing import Annotated, Literal, cast

from fastapi import APIRouter, Query

from app.api.deps import AdminPrincipal, DatabaseDep
from app.api.member_schemas import MemberInfo, MemberList
from app.api.schemas import error_responses
from app.tenants.members import list_members

router = APIRouter(prefix="/api/agent-runtime/members", tags=["members"])


@router.get("", response_model=MemberList, responses=error_responses(401, 403, 422))
async def get_members(
    principal: AdminPrincipal,
    db: DatabaseDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many.")] = 200,
) -> MemberList:
    """The users who have used the tenant, most recently seen first, each with the role of their
    latest token (roles come from the identity provider; this lists what the runtime saw)."""
    async with db.tenant(principal) as s:
        rows = await list_members(s, limit=limit)
    return MemberList(
        members=[
            MemberInfo(
                user_id=r.user_id,
                role=cast(Literal["owner", "admin", "member"], r.role),
                first_seen_at=r.first_seen_at,
                last_seen_at=r.last_seen_at,
            )
            for r in rows
        ]
    )
