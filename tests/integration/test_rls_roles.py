"""Roles inside a tenant, tested directly in SQL under RLS (like test_rls.py: transactions opened
exactly as `Database.tenant` opens them, with member/admin/service claims, plain SQL).

Tenant acme: u1's private session, u2's private session and u2's shared one (`visibility =
'tenant'`), each with a run and one row in every table hanging off sessions and runs.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.auth.principal import Principal
from app.db.engine import Database

T = "acme"
U1 = Principal(user_id="u1", tenant_id=T, role="member")
U2 = Principal(user_id="u2", tenant_id=T, role="member")
ADMIN = Principal(user_id="boss", tenant_id=T, role="admin")
SERVICE = Principal(user_id="runtime", tenant_id=T, role="service")

SESSIONS = {
    "u1-private": ("u1", "private"),
    "u2-private": ("u2", "private"),
    "u2-shared": ("u2", "tenant"),
}

CHILDREN: dict[str, str] = {
    "session_messages": "INSERT INTO session_messages (tenant_id, session_id, run_id, seq, role, "
    "payload) VALUES (:t, :session, :run, 1, 'user', '{}')",
    "run_events": "INSERT INTO run_events (tenant_id, run_id, seq, type, data) VALUES (:t, :run, 1,"
    ' \'run.queued\', \'{"sessionKey": "s", "status": "queued"}\')',
    "tool_executions": "INSERT INTO tool_executions (tenant_id, run_id, session_id, tool_call_id, "
    "name, args, status) VALUES (:t, :run, :session, 'c1', 'read_file', '{}', 'completed')",
    "tool_trust": "INSERT INTO tool_trust (tenant_id, session_id, tool, granted_by, expires_at) "
    "VALUES (:t, :session, 'x', 'u', now() + interval '1 hour')",
    "agent_context_snapshots": "INSERT INTO agent_context_snapshots (tenant_id, session_id, "
    "summary, first_message_seq, last_message_seq, tokens_before, tokens_after) "
    "VALUES (:t, :session, 's', 1, 1, 10, 5)",
    "workspace_files": "INSERT INTO workspace_files (tenant_id, session_id, path, content, size, "
    "sha256) VALUES (:t, :session, 'f', '\\x00', 1, 'x')",
    "subagent_spawns": "INSERT INTO subagent_spawns (tenant_id, parent_run_id, parent_session_id, "
    "task) VALUES (:t, :run, :session, 'task')",
    "agent_messages": "INSERT INTO agent_messages (tenant_id, sender_run_id, sender_session_id, "
    "tool_call_id, target_session_id, origin_run_id, message) "
    "VALUES (:t, :run, :session, 'c1', :session, :run, 'hi')",
    "run_inbox": "INSERT INTO run_inbox (tenant_id, run_id, kind, text) "
    "VALUES (:t, :run, 'steer', 'x')",
    "tool_approvals": "INSERT INTO tool_approvals (tenant_id, run_id, session_id, tool_call_id, "
    "tool, args, risk, reason, expires_at) VALUES (:t, :run, :session, 'c1', 'run_shell', '{}', "
    "'high', 'r', now() + interval '1 hour')",
    "idempotency_keys": "INSERT INTO idempotency_keys (tenant_id, user_id, key, request_hash, "
    "run_id, status_code, expires_at) VALUES (:t, :user, :key, 'h', :run, 202, "
    "now() + interval '1 hour')",
}
PARENT: dict[str, tuple[str, str]] = {
    "session_messages": ("session_id", "session"),
    "run_events": ("run_id", "run"),
    "tool_executions": ("session_id", "session"),
    "tool_trust": ("session_id", "session"),
    "agent_context_snapshots": ("session_id", "session"),
    "workspace_files": ("session_id", "session"),
    "subagent_spawns": ("parent_session_id", "session"),
    "agent_messages": ("sender_session_id", "session"),
    "run_inbox": ("run_id", "run"),
    "tool_approvals": ("run_id", "run"),
    "idempotency_keys": ("run_id", "run"),
}
"""Each table's column naming its parent session or run."""
VISIBLE_TO_U1 = {"u1-private", "u2-shared"}
OWN_ONLY = {"tool_approvals", "idempotency_keys"}
"""A member sees these of their own runs only (approvals, their request keys), shared or not."""


@pytest.fixture
async def ids(database: Database) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    async with database.owner() as s:
        agent = uuid.uuid4()
        await s.execute(
            text("INSERT INTO agents (id, tenant_id, name) VALUES (:id, :t, 'a')"),
            {"id": agent, "t": T},
        )
        await s.execute(
            text("INSERT INTO agent_tool_policies (tenant_id, profile) VALUES (:t, 'coding')"),
            {"t": T},
        )
        for key, (user, visibility) in SESSIONS.items():
            session, run = uuid.uuid4(), uuid.uuid4()
            await s.execute(
                text(
                    "INSERT INTO agent_sessions (id, tenant_id, session_key, agent_id, user_id, "
                    "visibility) VALUES (:id, :t, :key, :agent, :user, :v)"
                ),
                {"id": session, "t": T, "key": key, "agent": agent, "user": user, "v": visibility},
            )
            await s.execute(
                text(
                    "INSERT INTO agent_run_queue (id, tenant_id, session_id, agent_id, user_id, "
                    "input, status) VALUES (:id, :t, :session, :agent, :user, '{}', 'completed')"
                ),
                {"id": run, "t": T, "session": session, "agent": agent, "user": user},
            )
            values = {"t": T, "session": session, "run": run, "user": user, "key": key}
            for sql in CHILDREN.values():
                await s.execute(text(sql), values)
            out[key] = {"session": session, "run": run, "agent": agent, "user": user}
        await s.execute(
            text(
                "INSERT INTO tenant_members (tenant_id, user_id, role) VALUES (:t, 'u1', "
                "'member'), (:t, 'u2', 'member')"
            ),
            {"t": T},
        )
    return out


async def visible_keys(database: Database, who: Principal) -> set[str]:
    async with database.tenant(who) as s:
        return set(await s.scalars(text("SELECT session_key FROM agent_sessions")))


async def test_members_read_but_cannot_write_agents_or_policies(
    database: Database, ids: dict[str, dict[str, Any]]
) -> None:
    for table in ("agents", "agent_tool_policies"):
        async with database.tenant(U1) as s:
            assert await s.scalar(text(f"SELECT count(*) FROM {table}")) == 1  # noqa: S608
            updated = await s.execute(text(f"UPDATE {table} SET updated_at = now()"))  # noqa: S608
            assert updated.rowcount == 0, table  # type: ignore[attr-defined]
            deleted = await s.execute(text(f"DELETE FROM {table}"))  # noqa: S608
            assert deleted.rowcount == 0, table  # type: ignore[attr-defined]
        async with database.tenant(ADMIN) as s:
            updated = await s.execute(text(f"UPDATE {table} SET updated_at = now()"))  # noqa: S608
            assert updated.rowcount == 1, table  # type: ignore[attr-defined]
    with pytest.raises(DBAPIError, match="new row violates row-level security policy"):
        async with database.tenant(U1) as s:
            await s.execute(
                text("INSERT INTO agents (tenant_id, name) VALUES (:t, 'mine')"), {"t": T}
            )
    with pytest.raises(DBAPIError, match="new row violates row-level security policy"):
        async with database.tenant(U1) as s:
            await s.execute(
                text(
                    "INSERT INTO agent_tool_policies (tenant_id, agent_id, deny) "
                    "VALUES (:t, :a, '{x}')"
                ),
                {"t": T, "a": ids["u1-private"]["agent"]},
            )
    async with database.tenant(ADMIN) as s:
        await s.execute(text("INSERT INTO agents (tenant_id, name) VALUES (:t, 'mine')"), {"t": T})


async def test_a_member_sees_own_and_shared_sessions_admins_and_the_runtime_all(
    database: Database, ids: dict[str, dict[str, Any]]
) -> None:
    assert await visible_keys(database, U1) == VISIBLE_TO_U1
    assert await visible_keys(database, U2) == {"u2-private", "u2-shared"}
    for who in (ADMIN, SERVICE, Principal(user_id=T, tenant_id=T)):  # the last: the owner
        assert await visible_keys(database, who) == set(SESSIONS)
    async with database.tenant(U1) as s:
        runs = set(await s.scalars(text("SELECT id FROM agent_run_queue")))
    assert runs == {ids[k]["run"] for k in VISIBLE_TO_U1}


@pytest.mark.parametrize("table", list(CHILDREN))
async def test_rows_of_sessions_and_runs_follow_their_parent(
    database: Database, ids: dict[str, dict[str, Any]], table: str
) -> None:
    column, parent = PARENT[table]
    by_parent = {ids[k][parent]: k for k in SESSIONS}
    expected_u1 = {"u1-private"} if table in OWN_ONLY else VISIBLE_TO_U1
    async with database.tenant(U1) as s:
        seen = {by_parent[p] for p in await s.scalars(text(f"SELECT {column} FROM {table}"))}  # noqa: S608
        assert seen == expected_u1
        # rows it cannot see it cannot change either
        hidden = await s.execute(
            text(f"DELETE FROM {table} WHERE tenant_id = :t AND {column} = :p"),  # noqa: S608
            {"t": T, "p": ids["u2-private"][parent]},
        )
        assert hidden.rowcount == 0  # type: ignore[attr-defined]
    for who in (ADMIN, SERVICE):
        async with database.tenant(who) as s:
            assert await s.scalar(text(f"SELECT count(*) FROM {table}")) == 3  # noqa: S608
    # a member cannot add such a row to another member's private session
    with pytest.raises(DBAPIError, match="new row violates row-level security policy"):
        async with database.tenant(U1) as s:
            private = ids["u2-private"]
            await s.execute(
                text(CHILDREN[table].replace("'c1'", "'c2'").replace("'f'", "'g'")),
                {
                    "t": T,
                    "session": private["session"],
                    "run": private["run"],
                    "user": "u2",
                    "key": "other",
                },
            )


async def test_a_shared_session_is_read_only_to_other_members(
    database: Database, ids: dict[str, dict[str, Any]]
) -> None:
    shared = ids["u2-shared"]
    async with database.tenant(U1) as s:
        touched = await s.execute(
            text(
                "UPDATE agent_sessions SET title = 'mine now', visibility = 'private' WHERE id = :id"
            ),
            {"id": shared["session"]},
        )
        assert touched.rowcount == 0  # type: ignore[attr-defined]
        run = await s.execute(
            text("UPDATE agent_run_queue SET status = 'cancelled' WHERE id = :id"),
            {"id": shared["run"]},
        )
        assert run.rowcount == 0  # type: ignore[attr-defined]
        own = await s.execute(
            text("UPDATE agent_sessions SET visibility = 'tenant' WHERE session_key = 'u1-private'")
        )
        assert own.rowcount == 1  # type: ignore[attr-defined]
    # no run of one's own in someone else's session (shared or not), nor a session in their name
    with pytest.raises(DBAPIError, match="new row violates row-level security policy"):
        async with database.tenant(U1) as s:
            await s.execute(
                text(
                    "INSERT INTO agent_run_queue (tenant_id, session_id, agent_id, user_id, input) "
                    "VALUES (:t, :session, :agent, 'u1', '{}')"
                ),
                {"t": T, "session": shared["session"], "agent": shared["agent"]},
            )
    with pytest.raises(DBAPIError, match="new row violates row-level security policy"):
        async with database.tenant(U1) as s:
            await s.execute(
                text(
                    "INSERT INTO agent_sessions (tenant_id, session_key, agent_id, user_id) "
                    "VALUES (:t, 'forged', :agent, 'u2')"
                ),
                {"t": T, "agent": shared["agent"]},
            )
    # another member's private key: ON CONFLICT DO NOTHING is silent (the API answers 409)
    async with database.tenant(U1) as s:
        inserted = await s.execute(
            text(
                "INSERT INTO agent_sessions (tenant_id, session_key, agent_id, user_id) "
                "VALUES (:t, 'u2-private', :agent, 'u1') ON CONFLICT DO NOTHING"
            ),
            {"t": T, "agent": shared["agent"]},
        )
        assert inserted.rowcount == 0  # type: ignore[attr-defined]


async def test_tenant_members_a_member_sees_only_their_own_row(
    database: Database, ids: dict[str, dict[str, Any]]
) -> None:
    async with database.tenant(U1) as s:
        assert list(await s.scalars(text("SELECT user_id FROM tenant_members"))) == ["u1"]
        other = await s.execute(
            text("UPDATE tenant_members SET role = 'owner' WHERE user_id = 'u2'")
        )
        assert other.rowcount == 0  # type: ignore[attr-defined]
    async with database.tenant(ADMIN) as s:
        assert sorted(await s.scalars(text("SELECT user_id FROM tenant_members"))) == ["u1", "u2"]


async def test_a_member_cannot_promote_their_own_members_row(
    database: Database, ids: dict[str, dict[str, Any]]
) -> None:
    """The members list must not say `owner` for a user whose token says `member`."""
    with pytest.raises(DBAPIError, match="row-level security"):
        async with database.tenant(U1) as s:
            await s.execute(text("UPDATE tenant_members SET role = 'owner' WHERE user_id = 'u1'"))
    async with database.tenant(U1) as s:  # refreshing their row with their own role is fine
        touched = await s.execute(
            text("UPDATE tenant_members SET last_seen_at = now() WHERE user_id = 'u1'")
        )
        assert touched.rowcount == 1  # type: ignore[attr-defined]
