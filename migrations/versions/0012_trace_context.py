"""Observability: agent_run_queue.trace_context, and tool_approvals.created_at for the scrape.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24
"""

from pathlib import Path

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    op.execute(
        """
        REVOKE SELECT (created_at) ON tool_approvals FROM agent_runtime_worker;
        ALTER TABLE agent_run_queue DROP COLUMN IF EXISTS trace_context;
        """
    )
