"""Roles inside a tenant (agent_runtime_role()) and the append-only audit trail (audit_events).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from pathlib import Path

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    op.execute(
        """
        DROP TABLE IF EXISTS audit_events;
        DROP FUNCTION IF EXISTS agent_runtime_audit_immutable();
        DROP FUNCTION IF EXISTS public.agent_runtime_is_admin(), public.agent_runtime_role();
        """
    )
