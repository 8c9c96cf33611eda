"""Tool policies: the tenant's (`/policies`) and each agent's (`/agents/{agentId}/policy`).

`PUT` replaces a layer, `DELETE` removes it (the defaults, or the tenant's rules, apply again).
How the layers combine is documented in `app/tools/policy.py` and in the README.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Path
from sqlalchemy.ext.asyncio import AsyncSession

from app.agents.store import get_agent
from app.api.deps import AdminPrincipal, CurrentPrincipal, DatabaseDep, JsonBody
from app.api.errors import ApiError
from app.api.schemas import error_responses
from app.api.tool_schemas import PolicyBody, PolicyInfo
from app.audit.record import record_audit
from app.auth.principal import Principal
from app.tools.approval_rules import ApprovalRules
from app.tools.policy import DEFAULT_PROFILE, DEFAULT_SESSION_SCOPE, PolicyLayer
from app.tools.policy_store import StoredLayer, delete_layer, get_layer, put_layer

router = APIRouter(prefix="/api/agent-runtime", tags=["policies"])

AgentIdPath = Annotated[UUID, Path(alias="agentId", description="One of the tenant's agents.")]


def policy_info(agent_id: UUID | None, stored: StoredLayer | None) -> PolicyInfo:
    """The API view of a layer (the defaults when none is stored)."""
    if stored is None:
        return PolicyInfo(
            scope="tenant" if agent_id is None else "agent",
            agent_id=agent_id,
            configured=False,
            profile=DEFAULT_PROFILE if agent_id is None else None,
            allow=[],
            deny=[],
            require_approval=ApprovalRules(),
            max_calls_per_turn=None,
            max_calls_per_run=None,
            session_scope=DEFAULT_SESSION_SCOPE if agent_id is None else None,
            updated_at=None,
        )
    layer = stored.layer
    return PolicyInfo(
        scope=layer.scope,
        agent_id=agent_id,
        configured=True,
        profile=layer.profile,
        allow=list(layer.allow),
        deny=list(layer.deny),
        require_approval=layer.require_approval,
        max_calls_per_turn=layer.max_calls_per_turn,
        max_calls_per_run=layer.max_calls_per_run,
        session_scope=(
            layer.session_scope or DEFAULT_SESSION_SCOPE
            if agent_id is None
            else layer.session_scope
        ),
        updated_at=stored.row.updated_at,
    )


def layer_of(body: PolicyBody, agent_id: UUID | None) -> PolicyLayer:
    """The layer a PUT body describes (an agent's may not widen the session scope: 422)."""
    if agent_id is not None and body.session_scope == "tenant":
        raise ApiError(
            422,
            "an agent policy may only narrow sessionScope to 'user'; open it to the tenant in "
            "the tenant policy (PUT /policies)",
            field="sessionScope",
        )
    return PolicyLayer(
        scope="tenant" if agent_id is None else "agent",
        profile=body.profile or (DEFAULT_PROFILE if agent_id is None else None),
        allow=tuple(body.allow),
        deny=tuple(body.deny),
        require_approval=body.require_approval,
        max_calls_per_turn=body.max_calls_per_turn,
        max_calls_per_run=body.max_calls_per_run,
        session_scope=body.session_scope,
    )


def _audited(agent_id: UUID | None, stored: StoredLayer | None) -> dict[str, Any] | None:
    if stored is None:
        return None
    return policy_info(agent_id, stored).model_dump(
        mode="json", by_alias=True, exclude={"updated_at"}
    )


async def _audit(
    s: AsyncSession,
    principal: Principal,
    action: str,
    agent_id: UUID | None,
    before: StoredLayer | None,
    after: StoredLayer | None,
) -> None:
    """The policy change's audit event, in the change's transaction (target: `tenant` or the
    agent's id)."""
    await record_audit(
        s,
        principal,
        action,
        target_type="policy",
        target_id=str(agent_id) if agent_id is not None else "tenant",
        before=_audited(agent_id, before),
        after=_audited(agent_id, after),
    )


async def _require_agent(s: AsyncSession, agent_id: UUID) -> None:
    if await get_agent(s, agent_id) is None:
        raise ApiError(404, f"agent {agent_id} not found", field="agentId")


@router.get("/policies", response_model=PolicyInfo, responses=error_responses(401))
async def get_tenant_policy(principal: CurrentPrincipal, db: DatabaseDep) -> PolicyInfo:
    """The tenant-wide tool policy."""
    async with db.tenant(principal) as s:
        return policy_info(None, await get_layer(s, None))


@router.put(
    "/policies", response_model=PolicyInfo, responses=error_responses(400, 401, 403, 415, 422)
)
async def put_tenant_policy(
    principal: AdminPrincipal, db: DatabaseDep, _json: JsonBody, body: PolicyBody
) -> PolicyInfo:
    """Replace the tenant-wide tool policy (owners and admins only: 403 `forbidden_role`)."""
    async with db.tenant(principal) as s:
        before = await get_layer(s, None)
        stored = await put_layer(s, principal.tenant_id, None, layer_of(body, None))
        await _audit(s, principal, "policy.updated", None, before, stored)
    return policy_info(None, stored)


@router.delete("/policies", response_model=PolicyInfo, responses=error_responses(401, 403))
async def delete_tenant_policy(principal: AdminPrincipal, db: DatabaseDep) -> PolicyInfo:
    """Remove the tenant-wide policy (the defaults apply: profile coding, no limits). Owners
    and admins only."""
    async with db.tenant(principal) as s:
        before = await get_layer(s, None)
        await delete_layer(s, None)
        if before is not None:
            await _audit(s, principal, "policy.deleted", None, before, None)
    return policy_info(None, None)


@router.get(
    "/agents/{agentId}/policy", response_model=PolicyInfo, responses=error_responses(401, 404)
)
async def get_agent_policy(
    principal: CurrentPrincipal, db: DatabaseDep, agent_id: AgentIdPath
) -> PolicyInfo:
    """An agent's own tool policy (refining the tenant's)."""
    async with db.tenant(principal) as s:
        await _require_agent(s, agent_id)
        return policy_info(agent_id, await get_layer(s, agent_id))


@router.put(
    "/agents/{agentId}/policy",
    response_model=PolicyInfo,
    responses=error_responses(400, 401, 403, 404, 415, 422),
)
async def put_agent_policy(
    principal: AdminPrincipal,
    db: DatabaseDep,
    agent_id: AgentIdPath,
    _json: JsonBody,
    body: PolicyBody,
) -> PolicyInfo:
    """Replace an agent's own tool policy (owners and admins only: 403 `forbidden_role`)."""
    async with db.tenant(principal) as s:
        await _require_agent(s, agent_id)
        before = await get_layer(s, agent_id)
        stored = await put_layer(s, principal.tenant_id, agent_id, layer_of(body, agent_id))
        await _audit(s, principal, "policy.updated", agent_id, before, stored)
    return policy_info(agent_id, stored)


@router.delete(
    "/agents/{agentId}/policy",
    response_model=PolicyInfo,
    responses=error_responses(401, 403, 404),
)
async def delete_agent_policy(
    principal: AdminPrincipal, db: DatabaseDep, agent_id: AgentIdPath
) -> PolicyInfo:
    """Remove an agent's own policy (the tenant's applies alone). Owners and admins only."""
    async with db.tenant(principal) as s:
        await _require_agent(s, agent_id)
        before = await get_layer(s, agent_id)
        await delete_layer(s, agent_id)
        if before is not None:
            await _audit(s, principal, "policy.deleted", agent_id, before, None)
    return policy_info(agent_id, None)
