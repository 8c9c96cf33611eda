"""The memory search function bypasses RLS (SECURITY DEFINER): prove it leaks nothing.

`agent_runtime_memory_candidates` (migration 0022) reads the tenant from the request's claims and
applies the one visibility rule of agent_memory_entries (tenant_isolation) itself. Here: its rows
are exactly what RLS shows the same transaction, whatever the arguments; without a tenant it
refuses; only the app role may call it; and it is defined as intended (owner, search_path, ACL).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, ProgrammingError
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.principal import Principal
from app.db.engine import APP_ROLE, Database
from app.memory.embedders import OfflineEmbedder
from app.memory.search import CANDIDATES, vector_literal
from app.memory.store import MemoryStore

EMBEDDER = OfflineEmbedder()
WORDS = "deploy the billing service on friday"
# Both tenants store the same texts, so the search would find the other's rows if it could.
TEXTS = [WORDS, f"{WORDS} after the freeze", "unrelated note about lunch"]


@asynccontextmanager
async def as_app(database: Database, claims: dict[str, Any] | None) -> AsyncIterator[AsyncSession]:
    """A transaction as `agent_runtime_app` with these claims (None: no claims at all)."""
    async with database.owner() as s:
        await s.execute(text("SELECT set_config('role', :role, true)"), {"role": APP_ROLE})
        if claims is not None:
            await s.execute(
                text("SELECT set_config('request.jwt.claims', :c, true)"), {"c": json.dumps(claims)}
            )
        yield s


async def seed(database: Database) -> dict[str, Any]:
    """Per tenant: an agent, entries of that agent, shared entries; ids by tenant."""
    store = MemoryStore(database, EMBEDDER)
    out: dict[str, Any] = {}
    for tenant in ("acme", "evil"):
        who = Principal(user_id=f"{tenant}-owner", tenant_id=tenant, role="owner")
        async with database.owner() as s:
            agent = await s.scalar(
                text("INSERT INTO agents (tenant_id, name) VALUES (:t, 'a') RETURNING id"),
                {"t": tenant},
            )
        shared = [(await store.create(who, t, tags=["x"]))[0].id for t in TEXTS]
        own = [(await store.create(who, t, agent_id=agent, tags=["x"]))[0].id for t in TEXTS]
        out[tenant] = {"agent": agent, "shared": set(shared), "own": set(own)}
    return out


async def call(s: AsyncSession, **overrides: Any) -> set[uuid.UUID]:
    qvec = vector_literal((await EMBEDDER.embed([WORDS], "query"))[0])
    params = {
        "query": WORDS,
        "qvec": qvec,
        "embedder": EMBEDDER.name,
        "dim": EMBEDDER.dimension,
        "candidates": 1000,
        "ef_search": 100,
        "agent_id": None,
        "tags": [],
        "sync_commit": "on",
    } | overrides
    return {r.id for r in await s.execute(CANDIDATES, params)}


async def rls_visible(s: AsyncSession) -> set[uuid.UUID]:
    """What RLS shows this transaction of the rows the function could return."""
    rows = await s.execute(
        text(
            "SELECT id FROM agent_memory_entries WHERE content_tsv @@ "
            "websearch_to_tsquery('english', :q) OR (embedder = :e AND embedding_dim = 256)"
        ),
        {"q": WORDS, "e": EMBEDDER.name},
    )
    return set(rows.scalars())


CLAIMS = {
    "owner": {"sub": "u1", "app_metadata": {"tenant_id": "acme", "role": "owner"}},
    "member": {"sub": "u2", "app_metadata": {"tenant_id": "acme", "role": "member"}},
    "subject-tenant": {"sub": "acme", "role": "authenticated"},  # no app_metadata: sub is tenant
    "other": {"sub": "u3", "app_metadata": {"tenant_id": "evil", "role": "admin"}},
}


async def test_the_function_returns_exactly_what_rls_shows(database: Database) -> None:
    ids = await seed(database)
    for who, claims in CLAIMS.items():
        tenant = "evil" if who == "other" else "acme"
        async with as_app(database, claims) as s:
            visible = await rls_visible(s)
            assert visible == ids[tenant]["shared"] | ids[tenant]["own"], who
            assert await call(s) == visible, who


async def test_forged_arguments_never_reach_another_tenant(database: Database) -> None:
    ids = await seed(database)
    evil = ids["evil"]["shared"] | ids["evil"]["own"]
    acme = ids["acme"]["shared"] | ids["acme"]["own"]
    forged: list[dict[str, Any]] = [
        {"agent_id": ids["evil"]["agent"]},  # the other tenant's agent: only acme's shared rows
        {"tags": ["x"], "candidates": 100_000},
        {"qvec": None},
        {"query": "billing OR lunch OR deploy", "embedder": "other:model", "qvec": None},
        {"dim": 768, "qvec": None},
    ]
    async with as_app(database, CLAIMS["owner"]) as s:
        for args in forged:
            found = await call(s, **args)
            assert found, args
            assert found <= acme and not found & evil, args
        assert await call(s, agent_id=ids["evil"]["agent"]) == ids["acme"]["shared"]
        assert await call(s, agent_id=ids["acme"]["agent"]) == acme


async def test_without_a_tenant_in_the_claims_the_function_refuses(database: Database) -> None:
    await seed(database)
    no_tenant = [None, {}, {"role": "authenticated"}, {"sub": "", "app_metadata": {}}]
    for claims in no_tenant:
        with pytest.raises(DBAPIError, match="needs a tenant"):
            async with as_app(database, claims) as s:
                await call(s)


async def test_the_function_is_a_locked_down_security_definer(database: Database) -> None:
    async with database.owner() as s:
        row = (
            await s.execute(
                text(
                    "SELECT p.prosecdef, p.proconfig, p.proowner = c.relowner AS table_owner, "
                    "has_function_privilege('agent_runtime_app', p.oid, 'EXECUTE') AS app, "
                    "has_function_privilege('agent_runtime_worker', p.oid, 'EXECUTE') AS worker, "
                    "EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0) AS public "
                    "FROM pg_proc p, pg_class c "
                    "WHERE p.proname = 'agent_runtime_memory_candidates' "
                    "AND p.pronamespace = 'public'::regnamespace "
                    "AND c.oid = 'public.agent_memory_entries'::regclass"
                )
            )
        ).one()
    assert row.prosecdef and row.table_owner
    assert row.proconfig == ["search_path=pg_catalog, public"]
    assert row.app and not row.worker and not row.public
    with pytest.raises(ProgrammingError, match="permission denied"):
        async with database.queue() as s:
            await call(s)
