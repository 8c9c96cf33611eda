"""Lease expiries: agent_run_queue.lease_expiries (how often a run's worker stopped).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
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
    op.execute("ALTER TABLE agent_run_queue DROP COLUMN IF EXISTS lease_expiries")
