"""Multi-agent hand-offs: run_inbox, agent_messages, the waiting status, the run-ended trigger.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from pathlib import Path

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    op.execute(
        """
        DROP TRIGGER IF EXISTS agent_run_queue_run_ended ON agent_run_queue;
        DROP FUNCTION IF EXISTS agent_runtime_run_ended(), agent_runtime_announcement,
          agent_runtime_close_calls,
          agent_runtime_deliver, agent_runtime_followup, agent_runtime_emit;
        DROP TABLE IF EXISTS run_inbox, agent_messages;
        ALTER TABLE agent_tool_policies DROP COLUMN IF EXISTS session_scope;
        DROP INDEX IF EXISTS subagent_spawns_child;
        ALTER TABLE subagent_spawns DROP CONSTRAINT IF EXISTS subagent_spawns_call_key,
          DROP COLUMN IF EXISTS tool_call_id, DROP COLUMN IF EXISTS label,
          DROP COLUMN IF EXISTS child_session_key, DROP COLUMN IF EXISTS depth,
          DROP COLUMN IF EXISTS timeout_seconds, DROP COLUMN IF EXISTS error;
        ALTER TABLE agent_run_queue DROP COLUMN IF EXISTS parent_run_id,
          DROP COLUMN IF EXISTS wake_at, DROP COLUMN IF EXISTS not_before,
          DROP COLUMN IF EXISTS deadline_at, DROP COLUMN IF EXISTS lease_expiries;
        """
    )
