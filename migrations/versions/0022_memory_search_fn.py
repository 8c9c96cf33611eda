"""Memory search: agent_runtime_memory_candidates, a SECURITY DEFINER candidate function.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-24
"""

from pathlib import Path

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS public.agent_runtime_memory_candidates")
