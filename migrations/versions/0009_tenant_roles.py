"""Roles inside a tenant in RLS: admin-only management, session visibility, approvers, members.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from pathlib import Path

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


_TABLES = (
    "agents",
    "agent_tool_policies",
    "agent_sessions",
    "agent_run_queue",
    "session_messages",
    "tool_executions",
    "tool_trust",
    "agent_context_snapshots",
    "workspace_files",
    "subagent_spawns",
    "agent_messages",
    "run_events",
    "run_inbox",
    "tool_approvals",
    "idempotency_keys",
)
_POLICIES = (
    "tenant_read",
    "admin_insert",
    "admin_update",
    "admin_delete",
    "session_read",
    "session_write",
    "run_read",
    "run_write",
    "visible_with_parent",
)


def downgrade() -> None:
    statements = ["DROP TABLE IF EXISTS tenant_members"]
    for table in _TABLES:
        statements += [f"DROP POLICY IF EXISTS {p} ON {table}" for p in _POLICIES]
        statements.append(
            f"CREATE POLICY tenant_isolation ON {table} FOR ALL TO agent_runtime_app "
            "USING (tenant_id = (SELECT public.agent_runtime_tenant_id())) "
            "WITH CHECK (tenant_id = (SELECT public.agent_runtime_tenant_id()))"
        )
    statements += [
        "ALTER TABLE tool_approvals DROP COLUMN approver_role, DROP COLUMN allow_self_approval",
        "ALTER TABLE agent_sessions DROP COLUMN visibility",
    ]
    op.execute(";\n".join(statements))
