"""Agents of a tenant: lookup by id and the tenant's default agent (created on first use)."""

from __future__ import annotations

from uuid import UUID

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.principal import Principal
from app.db.models import Agent

DEFAULT_AGENT_NAME = "default"


async def get_agent(session: AsyncSession, agent_id: UUID) -> Agent | None:
    """The agent with this id, if the current tenant (RLS) can see it."""
    return await session.get(Agent, agent_id)


async def default_agent(
    session: AsyncSession, principal: Principal, *, model: str, max_turns: int
) -> Agent:
    """The tenant's default agent, created with the server defaults if it does not exist yet."""
    await session.execute(
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
