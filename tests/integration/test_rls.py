"""Row-level security, tested directly in SQL over every tenant table.

Rows of two tenants are inserted as the owner; then, inside transactions opened exactly as the app
opens them (`Database.tenant`: role `agent_runtime_app` plus the JWT claims), plain SQL must see,
change and create rows of its own tenant only. No ORM, no app code between the statement and
the policy.
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

A, B = "acme", "evil"

# One row per tenant and table; `ids` are the tenant's parent rows (see `seed`). Unique values are
# distinct from the seeded ones, so that only the policy can refuse a row.
INSERTS: dict[str, str] = {
    "agents": "INSERT INTO agents (tenant_id, name) VALUES (:tenant, :name)",
    "agent_sessions": (
        "INSERT INTO agent_sessions (tenant_id, session_key, agent_id, user_id) "
        "VALUES (:tenant, :name, :agent, 'u')"
    ),
    "agent_run_queue": (
        "INSERT INTO agent_run_queue (tenant_id, session_id, agent_id, user_id, input, status) "
        "VALUES (:tenant, :session, :agent, 'u', '{}', 'completed')"
    ),
    "session_messages": (
        "INSERT INTO session_messages (tenant_id, session_id, seq, role, payload) "
        "VALUES (:tenant, :session, :n, 'user', '{}')"
    ),
    "run_events": (
        "INSERT INTO run_events (tenant_id, run_id, seq, type, data) "
        'VALUES (:tenant, :run, :n, \'run.queued\', \'{"sessionKey": "s", "status": "queued"}\')'
    ),
    "tool_executions": (
        "INSERT INTO tool_executions (tenant_id, run_id, session_id, tool_call_id, name, args, "
        "status) VALUES (:tenant, :run, :session, :name, 'read_file', '{}', 'completed')"
    ),
    "agent_tool_policies": (
        "INSERT INTO agent_tool_policies (tenant_id, agent_id, profile) "
        "VALUES (:tenant, CASE WHEN :n = 1 THEN NULL ELSE CAST(:agent AS uuid) END, 'minimal')"
    ),
    "agent_memory_entries": (
        "INSERT INTO agent_memory_entries (tenant_id, content) VALUES (:tenant, :name)"
    ),
    "subagent_spawns": (
        "INSERT INTO subagent_spawns (tenant_id, parent_run_id, parent_session_id, task) "
        "VALUES (:tenant, :run, :session, :name)"
    ),
    "agent_context_snapshots": (
        "INSERT INTO agent_context_snapshots (tenant_id, session_id, summary, first_message_seq, "
        "last_message_seq, tokens_before, tokens_after) "
        "VALUES (:tenant, :session, :name, 1, 1, 10, 5)"
    ),
    "workspace_files": (
        "INSERT INTO workspace_files (tenant_id, session_id, path, content, size, sha256) "
        "VALUES (:tenant, :session, :name, '\\x00', 1, 'x')"
    ),
    "tool_approvals": (
        "INSERT INTO tool_approvals (tenant_id, run_id, session_id, tool_call_id, tool, args, "
        "risk, reason, expires_at) "
        "VALUES (:tenant, :run, :session, :name, 'run_shell', '{}', 'high', 'r', now() + interval '1 hour')"
    ),
    "tool_trust": (
        "INSERT INTO tool_trust (tenant_id, session_id, tool, granted_by, expires_at) "
        "VALUES (:tenant, :session, :name, 'u', now() + interval '1 hour')"
    ),
    "idempotency_keys": (
        "INSERT INTO idempotency_keys (tenant_id, user_id, key, request_hash, run_id, "
        "status_code, expires_at) "
        "VALUES (:tenant, 'u', :name, 'h', :run, 202, now() + interval '1 hour')"
    ),
    "agent_messages": (
        "INSERT INTO agent_messages (tenant_id, sender_run_id, sender_session_id, tool_call_id, "
        "target_session_id, origin_run_id, message) "
        "VALUES (:tenant, :run, :session, :name, :session, :run, 'hi')"
    ),
    "run_inbox": (
        "INSERT INTO run_inbox (tenant_id, run_id, kind, text) VALUES (:tenant, :run, 'steer', :name)"
    ),
    "tenant_provider_keys": (
        "INSERT INTO tenant_provider_keys (tenant_id, provider, key_id, nonce, ciphertext, last4) "
        "VALUES (:tenant, (ARRAY['gemini', 'openai'])[:n], 'k1', '\\x000000000000000000000000', "
        "'\\x00', 'abcd')"
    ),
    "tenant_http_tools": (
        "INSERT INTO tenant_http_tools (tenant_id, name, description, parameters, url, method, "
        "timeout_seconds, risk, secret_key_id, secret_nonce, secret_sealed) "
        "VALUES (:tenant, replace(:name, '-', '_'), 'd', '{}', 'https://x.example/', 'POST', "
        "5, 'low', 'k1', '\\x000000000000000000000000', '\\x00')"
    ),
    "tenant_members": (
        "INSERT INTO tenant_members (tenant_id, user_id, role) VALUES (:tenant, :name, 'member')"
    ),
    "tenant_mcp_servers": (
        "INSERT INTO tenant_mcp_servers (tenant_id, name, transport, updated_by) "
        "VALUES (:tenant, (ARRAY['srv1', 'srv2'])[:n], 'http', 'u')"
    ),
}
TABLES = list(INSERTS)
APPEND_ONLY = ["audit_events"]
"""Tenant tables no app role may update or delete: tests/integration/test_audit_table.py."""
QUOTA_TABLES = ["tenant_quotas", "tenant_usage_daily", "tenant_claims"]
"""One row per tenant (and day), no DELETE for the app: tests/integration/test_quotas_rls.py."""
WORKER_TABLES = ["queue_lanes"]
"""Queue bookkeeping the app role cannot see at all: tests/integration/test_queue_lanes.py."""


async def insert(s: AsyncSession, table: str, tenant: str, ids: dict[str, Any], n: int) -> None:
    await s.execute(
        text(INSERTS[table]),
        {"tenant": tenant, "name": f"{table}-{n}", "n": n, **ids},
    )


async def seed(database: Database) -> dict[str, dict[str, Any]]:
    """As the owner: for each tenant an agent, a session and a run, then one row in every table."""
    parents: dict[str, dict[str, Any]] = {}
    async with database.owner() as s:
        for tenant in (A, B):
            agent = uuid.uuid4()
            session = uuid.uuid4()
            run = uuid.uuid4()
            await s.execute(
                text("INSERT INTO agents (id, tenant_id, name) VALUES (:id, :t, 'parent')"),
                {"id": agent, "t": tenant},
            )
            await s.execute(
                text(
                    "INSERT INTO agent_sessions (id, tenant_id, session_key, agent_id, user_id) "
                    "VALUES (:id, :t, 'parent', :agent, 'u')"
                ),
                {"id": session, "t": tenant, "agent": agent},
            )
            await s.execute(
                text(
                    "INSERT INTO agent_run_queue (id, tenant_id, session_id, agent_id, user_id, "
                    "input, status) VALUES (:id, :t, :session, :agent, 'u', '{}', 'completed')"
                ),
                {"id": run, "t": tenant, "session": session, "agent": agent},
            )
            parents[tenant] = {"agent": agent, "session": session, "run": run}
            for table in TABLES:
                await insert(s, table, tenant, parents[tenant], 1)
    return parents


async def counts(s: AsyncSession, table: str) -> dict[str, int]:
    rows = await s.execute(
        text(f"SELECT tenant_id, count(*) AS n FROM {table} GROUP BY tenant_id")  # noqa: S608
    )
    return {r.tenant_id: r.n for r in rows}


@asynccontextmanager
async def as_app(database: Database, claims: dict[str, Any] | None) -> AsyncIterator[AsyncSession]:
    """A transaction as `agent_runtime_app` with these claims (None: no claims set at all)."""
    async with database.owner() as s:
        await s.execute(text("SELECT set_config('role', :role, true)"), {"role": APP_ROLE})
        if claims is not None:
            await s.execute(
                text("SELECT set_config('request.jwt.claims', :c, true)"),
                {"c": json.dumps(claims)},
            )
        yield s


@pytest.fixture
async def parents(database: Database) -> dict[str, dict[str, Any]]:
    return await seed(database)


async def test_the_test_covers_every_table_with_a_tenant_id(database: Database) -> None:
    async with database.owner() as s:
        rows = await s.scalars(
            text(
                "SELECT table_name FROM information_schema.columns WHERE table_schema = 'public' "
                "AND column_name = 'tenant_id' ORDER BY table_name"
            )
        )
        assert sorted(rows) == sorted(TABLES + APPEND_ONLY + QUOTA_TABLES + WORKER_TABLES)


async def test_the_owner_sees_both_tenants(
    database: Database, parents: dict[str, dict[str, Any]]
) -> None:
    async with database.owner() as s:
        for table in TABLES:
            expected = 2 if table in ("agents", "agent_sessions", "agent_run_queue") else 1
            assert await counts(s, table) == {A: expected, B: expected}, table


@pytest.mark.parametrize("table", TABLES)
async def test_a_tenant_sees_and_changes_only_its_own_rows(
    database: Database, parents: dict[str, dict[str, Any]], alice: Principal, table: str
) -> None:
    own = 2 if table in ("agents", "agent_sessions", "agent_run_queue") else 1
    async with database.tenant(alice) as s:
        assert await counts(s, table) == {A: own}
        assert (await s.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one() == own  # noqa: S608
        # B's rows cannot be changed or deleted: to this transaction they do not exist.
        updated = await s.execute(
            text(f"UPDATE {table} SET tenant_id = tenant_id WHERE tenant_id = :b"),  # noqa: S608
            {"b": B},
        )
        assert updated.rowcount == 0  # type: ignore[attr-defined]
        deleted = await s.execute(text(f"DELETE FROM {table} WHERE tenant_id <> :a"), {"a": A})  # noqa: S608
        assert deleted.rowcount == 0  # type: ignore[attr-defined]
        # Its own rows it can change (the policy is not simply "deny everything").
        touched = await s.execute(text(f"UPDATE {table} SET tenant_id = tenant_id"))  # noqa: S608
        assert touched.rowcount == own  # type: ignore[attr-defined]
        await insert(s, table, A, parents[A], 2)
    async with database.owner() as s:
        assert await counts(s, table) == {A: own + 1, B: own}


@pytest.mark.parametrize("table", TABLES)
async def test_a_tenant_cannot_insert_or_move_rows_into_another_tenant(
    database: Database, parents: dict[str, dict[str, Any]], alice: Principal, table: str
) -> None:
    with pytest.raises(DBAPIError, match="new row violates row-level security policy"):
        async with database.tenant(alice) as s:
            await insert(s, table, B, parents[A], 2)
    with pytest.raises(DBAPIError, match="new row violates row-level security policy"):
        async with database.tenant(alice) as s:
            await s.execute(text(f"UPDATE {table} SET tenant_id = :b"), {"b": B})  # noqa: S608
    async with database.owner() as s:
        own = 2 if table in ("agents", "agent_sessions", "agent_run_queue") else 1
        assert await counts(s, table) == {A: own, B: own}


@pytest.mark.parametrize(
    "claims",
    [
        None,  # the role without any claims (a query outside Database.tenant)
        {},
        {"role": "authenticated"},  # neither sub nor app_metadata.tenant_id
        {"sub": "", "app_metadata": {}},
    ],
    ids=["unset", "empty", "no-subject", "blank-subject"],
)
async def test_without_a_tenant_in_the_claims_nothing_is_visible(
    database: Database, parents: dict[str, dict[str, Any]], claims: dict[str, Any] | None
) -> None:
    async with as_app(database, claims) as s:
        for table in TABLES:
            assert await counts(s, table) == {}, table
            deleted = await s.execute(text(f"DELETE FROM {table}"))  # noqa: S608
            assert deleted.rowcount == 0, table  # type: ignore[attr-defined]


async def test_the_tenant_falls_back_to_the_subject(
    database: Database, parents: dict[str, dict[str, Any]]
) -> None:
    """No app_metadata.tenant_id: the user is their own tenant (`sub`)."""
    async with as_app(database, {"sub": B, "role": "authenticated"}) as s:
        assert await counts(s, "agents") == {B: 2}
    async with as_app(database, {"sub": "someone", "app_metadata": {"tenant_id": B}}) as s:
        assert await counts(s, "agents") == {B: 2}


WORKER_HIDDEN = [t for t in TABLES if t != "agent_run_queue"]


@pytest.mark.parametrize("table", WORKER_HIDDEN)
async def test_the_worker_role_cannot_read_tenant_tables(
    database: Database, parents: dict[str, dict[str, Any]], table: str
) -> None:
    """agent_runtime_worker reads the queue only (plus the few columns that memory re-embed and
    approval expiry need to find their tenants — never content)."""
    with pytest.raises(ProgrammingError, match="permission denied"):
        async with database.queue() as s:
            await s.execute(text(f"SELECT * FROM {table}"))  # noqa: S608
    with pytest.raises(ProgrammingError, match="permission denied"):
        async with database.queue() as s:
            await s.execute(text(f"DELETE FROM {table}"))  # noqa: S608
    # run_events: the claim's run.started / run.resumed only (migration 0025), so any other
    # event is refused by the policy rather than by the grant
    refused = "row-level security" if table == "run_events" else "permission denied"
    with pytest.raises(ProgrammingError, match=refused):
        async with database.queue() as s:
            await insert(s, table, A, parents[A], 2)


async def test_the_worker_role_stores_only_a_start_event_and_only_under_the_runs_own_tenant(
    database: Database, parents: dict[str, dict[str, Any]]
) -> None:
    """What the claim needs (migration 0025), and nothing a compromised worker could use to
    put an event into another tenant's run."""
    started = (
        "INSERT INTO run_events (tenant_id, run_id, seq, type, data) "
        'VALUES (:tenant, :run, 50, :type, \'{"attempt": 1, "workerId": "w"}\')'
    )
    async with database.queue() as s:
        await s.execute(
            text(started), {"tenant": A, "run": parents[A]["run"], "type": "run.started"}
        )
    for tenant, run, kind in [
        (B, parents[A]["run"], "run.started"),  # A's run, filed under B
        (A, parents[A]["run"], "assistant.message"),  # not a start event
    ]:
        with pytest.raises(ProgrammingError, match="row-level security"):
            async with database.queue() as s:
                await s.execute(text(started), {"tenant": tenant, "run": run, "type": kind})


async def test_the_worker_role_sees_the_queue_of_every_tenant_but_cannot_add_to_it(
    database: Database, parents: dict[str, dict[str, Any]]
) -> None:
    async with database.queue() as s:
        assert await counts(s, "agent_run_queue") == {A: 2, B: 2}
    with pytest.raises(ProgrammingError, match="permission denied"):
        async with database.queue() as s:
            await insert(s, "agent_run_queue", A, parents[A], 2)
    with pytest.raises(ProgrammingError, match="permission denied"):
        async with database.queue() as s:
            await s.execute(text("DELETE FROM agent_run_queue"))
