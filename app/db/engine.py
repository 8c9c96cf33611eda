"""The async engine and the three kinds of transaction the runtime opens.

* `tenant(principal)`: as role `agent_runtime_app` with the principal's JWT claims set, so the
  RLS policies (see the initial migration) confine every statement to the principal's tenant.
* `queue()`: as role `agent_runtime_worker`, which sees `agent_run_queue` across tenants — the
  claim, lease and recovery verbs — and only the columns of `agent_memory_entries` and
  `tool_approvals` that say which tenants have re-embedding or expiry work (no content).
* `owner()`: as the connecting user (migrations check, readiness, tests). Never used for tenant data.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import text
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from app.auth.principal import Principal
from app.db.urls import async_url

APP_ROLE = "agent_runtime_app"
WORKER_ROLE = "agent_runtime_worker"

_SET_TENANT = text(
    "SELECT set_config('role', :role, true), set_config('request.jwt.claims', :claims, true)"
)
_SET_ROLE = text("SELECT set_config('role', :role, true)")


@asynccontextmanager
async def acting_as(
    session: AsyncSession, principal: Principal, then: Principal
) -> AsyncIterator[AsyncSession]:
    """Within a `Database.tenant(then)` transaction, run statements as `principal` (e.g. the
    runtime creating a member's tenant's default agent), then go back to `then`'s claims."""
    await session.execute(
        _SET_TENANT, {"role": APP_ROLE, "claims": json.dumps(principal.db_claims())}
    )
    try:
        yield session
    finally:
        await session.execute(
            _SET_TENANT, {"role": APP_ROLE, "claims": json.dumps(then.db_claims())}
        )


class Database:
    """Owns the connection pool; hands out role- and tenant-scoped transactions."""

    def __init__(self, url: str, *, pool_size: int = 10, max_overflow: int = 10) -> None:
        self.url = url
        self.engine: AsyncEngine = create_async_engine(
            async_url(url),
            pool_size=pool_size,
            max_overflow=max_overflow,
            pool_pre_ping=True,
        )
        self._sessions = async_sessionmaker(self.engine, expire_on_commit=False)

    @asynccontextmanager
    async def tenant(self, principal: Principal) -> AsyncIterator[AsyncSession]:
        """A transaction confined by RLS to `principal`'s tenant; commits on success."""
        async with self._sessions() as session, session.begin():
            await session.execute(
                _SET_TENANT, {"role": APP_ROLE, "claims": json.dumps(principal.db_claims())}
            )
            yield session

    @asynccontextmanager
    async def queue(self) -> AsyncIterator[AsyncSession]:
        """A transaction as the worker role (cross-tenant queue verbs only)."""
        async with self._sessions() as session, session.begin():
            await session.execute(_SET_ROLE, {"role": WORKER_ROLE})
            yield session

    @asynccontextmanager
    async def owner(self) -> AsyncIterator[AsyncSession]:
        """A transaction as the connecting user. Not for tenant data."""
        async with self._sessions() as session, session.begin():
            yield session

    async def dispose(self) -> None:
        """Close every pooled connection."""
        await self.engine.dispose()
