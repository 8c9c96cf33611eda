"""Agents of a tenant: create, list, look up, change, and the default agent (created on first use).

Every function takes a session opened with `Database.tenant(...)`: RLS confines it to the tenant.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.principal import Principal
from app.db.engine import acting_as
from app.db.models import Agent

DEFAULT_AGENT_NAME = "default"


async def get_agent(session: AsyncSession, agent_id: UUID) -> Agent | None:
    """The agent with this id, if the current tenant (RLS) can see it."""
    return await session.get(Agent, agent_id)


async def default_agent(
    session: AsyncSession, principal: Principal, *, model: str, max_turns: int
) -> Agent:
    """The tenant's default agent, created with the server defaults if it does not exist yet.

    Members may not write agents (RLS); the runtime creates the default on their behalf.
    """
    existing = await find_default_agent(session)
    if existing is not None:
        return existing
    create = (
        insert(Agent)
        .values(
            tenant_id=principal.tenant_id,
            name=DEFAULT_AGENT_NAME,
            model=model,
            max_turns=max_turns,
            is_default=True,
            owner_user_id=principal.user_id,
        )
        .on_conflict_do_nothing()
    )
    if principal.role == "member":
        async with acting_as(session, principal.as_service(), then=principal):
            await session.execute(create)
    else:
        await session.execute(create)
    agent = await session.scalar(
        select(Agent).where(Agent.tenant_id == principal.tenant_id, Agent.is_default)
    )
    if agent is None:  # a tenant's agent named "default" exists but is not the default
        agent = await session.scalar(
            select(Agent).where(
                Agent.tenant_id == principal.tenant_id, Agent.name == DEFAULT_AGENT_NAME
            )
        )
    assert agent is not None
    return agent


async def find_default_agent(session: AsyncSession) -> Agent | None:
    """The tenant's default agent, if it exists yet (never creates it)."""
    return await session.scalar(select(Agent).where(Agent.is_default))


async def list_agents(session: AsyncSession) -> list[Agent]:
    """The tenant's agents: the default agent first, then oldest first."""
    rows = await session.scalars(
        select(Agent).order_by(Agent.is_default.desc(), Agent.created_at, Agent.name)
    )
    return list(rows)


async def insert_agent(session: AsyncSession, principal: Principal, **values: Any) -> Agent:
    """A new agent of the caller's tenant, owned by the caller (`IntegrityError` on a taken name)."""
    agent: Agent | None = await session.scalar(
        insert(Agent)
        .values(tenant_id=principal.tenant_id, owner_user_id=principal.user_id, **values)
        .returning(Agent)
    )
    assert agent is not None
    return agent


async def lock_agent(session: AsyncSession, agent_id: UUID) -> Agent | None:
    """The agent with this id, locked for an update until the transaction ends."""
    return await session.get(Agent, agent_id, with_for_update=True)


async def update_agent(session: AsyncSession, agent: Agent, values: dict[str, Any]) -> Agent:
    """Change `agent`'s columns to `values` (its `updated_at` too) and return it refreshed."""
    await session.execute(
        update(Agent).where(Agent.id == agent.id).values(**values, updated_at=func.now())
    )
    await session.refresh(agent)
    return agent


async def delete_agent(session: AsyncSession, agent_id: UUID) -> bool:
    """Delete the agent (its policy and memory go with it); whether it existed.

    `IntegrityError` while sessions, runs or spawns still name it (their history keeps it).
    """
    gone = await session.scalar(delete(Agent).where(Agent.id == agent_id).returning(Agent.id))
    return gone is not None
