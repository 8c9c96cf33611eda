"""Context management: token accounting per message, session and run; compaction bookkeeping.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from pathlib import Path

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    op.execute(
        """
        DROP INDEX IF EXISTS agent_context_snapshots_session_last;
        ALTER TABLE agent_context_snapshots DROP COLUMN IF EXISTS summary_tokens,
          DROP COLUMN IF EXISTS messages_covered;
        ALTER TABLE agent_run_queue DROP COLUMN IF EXISTS context_tokens,
          DROP COLUMN IF EXISTS context_window, DROP COLUMN IF EXISTS compactions;
        ALTER TABLE agent_sessions DROP COLUMN IF EXISTS token_count,
          DROP COLUMN IF EXISTS context_tokens, DROP COLUMN IF EXISTS compactions,
          DROP COLUMN IF EXISTS memory_flushed_through_seq;
        """
    )
