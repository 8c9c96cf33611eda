"""The async engine and the three kinds of transaction the runtime opens.

* `tenant(principal)`: as role `agent_runtime_app` with the principal's JWT claims set, so the
  RLS policies (see the initial migration) confine every statement to the principal's tenant.
* `queue()`: as role `agent_runtime_worker`, which sees `agent_run_queue` across tenants — the
  claim, lease and recovery verbs — and only the columns of `agent_memory_entries` and
  `tool_approvals` that say which tenants have re-embedding or expiry work (no content).
* `owner()`: as the connecting user (migrations check, readiness, tests). Never used for tenant data.

`sharing(principal)` makes the `tenant` transactions opened inside it (by any code, for the same
tenant) one transaction: a run's preparation reads its agent, policy, keys, tools and transcript
from a dozen modules in one round of the pool instead of one transaction each.

Connections are not pinged before use (`pool_pre_ping`): that costs a BEGIN/ROLLBACK round trip
per transaction. A connection the server dropped fails the transaction's first statement;
SQLAlchemy then invalidates the whole pool (every older connection is replaced at its next
checkout) and the transaction is begun again on a fresh connection (`_begin`), before anything
was done in it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from sqlalchemy import TextClause, text
from sqlalchemy.exc import DBAPIError
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


@dataclass(eq=False)
class _Shared:
    """The open transaction of a `Database.sharing` block."""

    db: Database
    tenant_id: str
    session: AsyncSession
    claims: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    holder: asyncio.Task[object] | None = None
    usable: bool = True
    failed: bool = False


_SHARED: ContextVar[_Shared | None] = ContextVar("agent_runtime_shared_tx", default=None)


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
        )
        self._sessions = async_sessionmaker(self.engine, expire_on_commit=False)

    @asynccontextmanager
    async def tenant(self, principal: Principal) -> AsyncIterator[AsyncSession]:
        """A transaction confined by RLS to `principal`'s tenant; commits on success.

        Inside a `sharing` block of the same tenant: that block's transaction (see there)."""
        shared = _SHARED.get()
        if (
            shared is not None
            and shared.usable
            and shared.db is self
            and shared.tenant_id == principal.tenant_id
            and shared.holder is not asyncio.current_task()  # nested: a transaction of its own
        ):
            async with self._joined(shared, principal) as session:
                yield session
            return
        claims = json.dumps(principal.db_claims())
        async with self._transaction(_SET_TENANT, {"role": APP_ROLE, "claims": claims}) as session:
            yield session

    @asynccontextmanager
    async def sharing(self, principal: Principal) -> AsyncIterator[None]:
        """One transaction for every `tenant(p)` opened inside the block (by this task or the
        tasks it starts) where `p` is of `principal`'s tenant; committed when the block ends.

        Meant for phases of reads. Users take turns (a lock); one nested in another's block gets
        a transaction of its own, as does everyone after a statement failed in the shared one
        (its transaction is aborted). Each user runs with its own principal's claims."""
        claims = json.dumps(principal.db_claims())
        session = await self._begin(_SET_TENANT, {"role": APP_ROLE, "claims": claims})
        shared = _Shared(self, principal.tenant_id, session, claims)
        token = _SHARED.set(shared)
        try:
            yield
        except BaseException:
            shared.failed = True
            raise
        finally:
            _SHARED.reset(token)
            shared.usable = False  # tasks started inside may outlive the block
            try:
                if shared.failed:
                    await session.rollback()
                else:
                    await session.commit()
            finally:
                await session.close()

    @asynccontextmanager
    async def _joined(self, shared: _Shared, principal: Principal) -> AsyncIterator[AsyncSession]:
        async with shared.lock:
            if not shared.usable:  # failed or closed while this user waited
                async with self.tenant(principal) as session:
                    yield session
                return
            claims = json.dumps(principal.db_claims())
            if claims != shared.claims:
                await shared.session.execute(_SET_TENANT, {"role": APP_ROLE, "claims": claims})
                shared.claims = claims
            shared.holder = asyncio.current_task()
            try:
                yield shared.session
            except BaseException:
                shared.usable, shared.failed = False, True
                raise
            finally:
                shared.holder = None

    @asynccontextmanager
    async def queue(self) -> AsyncIterator[AsyncSession]:
        """A transaction as the worker role (cross-tenant queue verbs only)."""
        async with self._transaction(_SET_ROLE, {"role": WORKER_ROLE}) as session:
            yield session

    @asynccontextmanager
    async def owner(self) -> AsyncIterator[AsyncSession]:
        """A transaction as the connecting user. Not for tenant data."""
        async with self._sessions() as session, session.begin():
            yield session

    async def _begin(self, first: TextClause, params: dict[str, str]) -> AsyncSession:
        """A session in a transaction whose `first` statement ran. A pooled connection the
        server closed since (a restart, a failover, an idle timeout) fails that statement before
        anything was done: SQLAlchemy then invalidates the pool and the transaction is begun
        again, once, on a fresh connection."""
        for attempt in (1, 2):
            session = self._sessions()
            try:
                await session.begin()
                await session.execute(first, params)
                return session
            except DBAPIError as exc:
                await session.close()
                if attempt == 2 or not exc.connection_invalidated:
                    raise
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def _transaction(
        self, first: TextClause, params: dict[str, str]
    ) -> AsyncIterator[AsyncSession]:
        session = await self._begin(first, params)
        try:
            yield session
            await session.commit()
        except BaseException:
            await session.rollback()
            raise
        finally:
            await session.close()

    async def dispose(self) -> None:
        """Close every pooled connection."""
        await self.engine.dispose()
