"""Fallback models: agent_run_queue.usage_by_model, a run's tokens split by model.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-24
"""

from pathlib import Path

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    op.execute("ALTER TABLE agent_run_queue DROP COLUMN IF EXISTS usage_by_model")
