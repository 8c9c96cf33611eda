"""Reading and writing policy layers (`agent_tool_policies`) and resolving a run's policy.

Every function takes an `AsyncSession` opened with `Database.tenant(...)`: RLS confines it to the
tenant, so another tenant's agent or policy does not exist here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from uuid import UUID

from sqlalchemy import ColumnElement, delete, func, literal, or_, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from app.db.models import Agent, AgentToolPolicy, Run
from app.tools.approval_rules import ApprovalRules
from app.tools.policy import EffectivePolicy, PolicyLayer, SessionScope


@dataclass(frozen=True, slots=True)
class StoredLayer:
    """A policy layer as stored, with its timestamps."""

    layer: PolicyLayer
    row: AgentToolPolicy


def layer_of(row: AgentToolPolicy) -> PolicyLayer:
    """The policy layer of a stored row."""
    return PolicyLayer(
        scope="tenant" if row.agent_id is None else "agent",
        profile=row.profile,
        allow=tuple(row.allow),
        deny=tuple(row.deny),
        require_approval=ApprovalRules.parse(row.require_approval),
        max_calls_per_turn=row.max_calls_per_turn,
        max_calls_per_run=row.max_calls_per_run,
        session_scope=_session_scope(row.session_scope),
    )


def _session_scope(stored: str | None) -> SessionScope | None:
    if stored == "tenant":
        return "tenant"
    if stored == "user":
        return "user"
    return None  # NULL (the column's CHECK admits nothing else)


async def get_layer(s: AsyncSession, agent_id: UUID | None) -> StoredLayer | None:
    """The tenant's layer (`agent_id` None) or the agent's, if stored."""
    scope = (
        AgentToolPolicy.agent_id.is_(None)
        if agent_id is None
        else (AgentToolPolicy.agent_id == agent_id)
    )
    row = await s.scalar(select(AgentToolPolicy).where(scope))
    return None if row is None else StoredLayer(layer_of(row), row)


async def put_layer(
    s: AsyncSession, tenant_id: str, agent_id: UUID | None, layer: PolicyLayer
) -> StoredLayer:
    """Create or replace the tenant's (`agent_id` None) or the agent's layer."""
    values = {
        "profile": layer.profile,
        "allow": list(layer.allow),
        "deny": list(layer.deny),
        "require_approval": layer.require_approval.stored(),
        "max_calls_per_turn": layer.max_calls_per_turn,
        "max_calls_per_run": layer.max_calls_per_run,
        "session_scope": layer.session_scope,
    }
    row = await s.scalar(
        insert(AgentToolPolicy)
        .values(tenant_id=tenant_id, agent_id=agent_id, **values)
        .on_conflict_do_update(
            constraint="agent_tool_policies_scope_key",
            set_={**values, "updated_at": func.now()},
        )
        .returning(AgentToolPolicy)
        # the row may be loaded already (the audit's "before"): take the new values
        .execution_options(populate_existing=True)
    )
    assert row is not None
    return StoredLayer(layer_of(row), row)


async def delete_layer(s: AsyncSession, agent_id: UUID | None) -> bool:
    """Remove the tenant's (`agent_id` None) or the agent's layer; whether there was one."""
    scope = (
        AgentToolPolicy.agent_id.is_(None)
        if agent_id is None
        else (AgentToolPolicy.agent_id == agent_id)
    )
    gone = await s.scalar(delete(AgentToolPolicy).where(scope).returning(AgentToolPolicy.id))
    return gone is not None


async def resolve_policy(s: AsyncSession, *, agent: Agent | None, user_id: str) -> EffectivePolicy:
    """The policy of a run of `agent` (None: tenant layer only) by `user_id`."""
    scope: ColumnElement[bool] = AgentToolPolicy.agent_id.is_(None)
    if agent is not None:
        scope = or_(scope, AgentToolPolicy.agent_id == agent.id)
    rows = list(await s.scalars(select(AgentToolPolicy).where(scope)))
    tenant = next((layer_of(r) for r in rows if r.agent_id is None), None)
    own = next((layer_of(r) for r in rows if r.agent_id is not None), None)
    owner = None if agent is None else agent.owner_user_id
    return EffectivePolicy(
        tenant=tenant, agent=own, is_owner=owner is not None and owner == user_id
    )


async def resolve_run_policy(
    s: AsyncSession, *, agent_id: UUID | None, user_id: str
) -> EffectivePolicy:
    """`resolve_policy` for an agent id (an unknown agent: tenant layer only)."""
    agent = None if agent_id is None else await s.get(Agent, agent_id)
    return await resolve_policy(s, agent=agent, user_id=user_id)


async def sessions_owner_filter(s: AsyncSession, *, run_id: UUID, user_id: str) -> str | None:
    """Whose sessions the sessions tools of run `run_id` (by `user_id`) reach: `user_id`'s only
    (session scope `user`, the default), or None: the whole tenant's (scope `tenant`)."""
    agent_id = await s.scalar(select(Run.agent_id).where(Run.id == run_id))
    policy = await resolve_run_policy(s, agent_id=agent_id, user_id=user_id)
    return None if policy.session_scope == "tenant" else user_id


MAX_ANCESTORS = 20
"""How far up a spawn chain the ceilings are looked for (spawn depth is capped at 10)."""


async def resolve_lineage_policy(
    s: AsyncSession, *, run_id: UUID, agent_id: UUID | None, user_id: str
) -> EffectivePolicy:
    """The policy of run `run_id` (of `agent_id`, by `user_id`) with, for a spawned sub-agent's
    run, the policy of every run above it as a ceiling (`EffectivePolicy.ceilings`)."""
    own = await resolve_run_policy(s, agent_id=agent_id, user_id=user_id)
    ceilings = [
        await resolve_run_policy(s, agent_id=a_agent, user_id=a_user)
        for a_agent, a_user in await _ancestors(s, run_id)
    ]
    return replace(own, ceilings=tuple(ceilings)) if ceilings else own


async def _ancestors(s: AsyncSession, run_id: UUID) -> list[tuple[UUID, str]]:
    """(agent, user) of the runs that spawned `run_id`, nearest first."""
    up = (
        select(Run.parent_run_id.label("id"), literal(1).label("level"))
        .where(Run.id == run_id, Run.parent_run_id.is_not(None))
        .cte("up", recursive=True)
    )
    parent = aliased(Run)
    up = up.union_all(
        select(parent.parent_run_id, up.c.level + 1)
        .join(up, parent.id == up.c.id)
        .where(parent.parent_run_id.is_not(None), up.c.level < MAX_ANCESTORS)
    )
    rows = await s.execute(
        select(Run.agent_id, Run.user_id).join(up, Run.id == up.c.id).order_by(up.c.level)
    )
    return [(r.agent_id, r.user_id) for r in rows]
