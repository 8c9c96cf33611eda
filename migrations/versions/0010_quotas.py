"""Quotas per tenant (tenant_quotas), tokens per tenant and day (tenant_usage_daily) and fair
claiming across tenants (tenant_claims).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24
"""

from pathlib import Path

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    op.execute(
        """
        DROP INDEX IF EXISTS agent_run_queue_tenant_live;
        DROP INDEX IF EXISTS agent_run_queue_queued_tenant;
        DROP TABLE IF EXISTS tenant_claims, tenant_usage_daily, tenant_quotas;
        """
    )
