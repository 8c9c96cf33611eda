"""Initial schema: tables, auth shim, roles, RLS policies and NOTIFY triggers.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from pathlib import Path

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Straight to psycopg without parameters: the file is plain SQL (dollar quotes, format()'s %I),
    # which neither SQLAlchemy's text() nor a parameterised execute would leave alone.
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    op.execute(
        """
        DROP TABLE IF EXISTS workspace_files, agent_context_snapshots, subagent_spawns,
          agent_memory_entries, agent_tool_policies, tool_executions, run_events,
          session_messages, agent_run_queue, agent_sessions, agents CASCADE;
        DROP FUNCTION IF EXISTS agent_runtime_notify_runs, agent_runtime_notify_cancel,
          agent_runtime_notify_event, public.agent_runtime_tenant_id;
        """
    )
