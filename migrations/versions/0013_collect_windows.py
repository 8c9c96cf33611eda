"""Index the debounce windows of queued runs: an idle worker asks when the next one ends.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX IF NOT EXISTS agent_run_queue_windows ON agent_run_queue (not_before) "
        "WHERE status = 'queued' AND not_before IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS agent_run_queue_windows")
