"""Index the sub-agent spawn rows by child session: the sessions list names each session's parent.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX IF NOT EXISTS subagent_spawns_child_session_idx "
        "ON subagent_spawns (child_session_id, created_at) WHERE child_session_id IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS subagent_spawns_child_session_idx")
