"""A tenant's daily usage in 16 shard rows (no single hot row per tenant and day).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-24
"""

from pathlib import Path

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    op.execute(
        "CREATE TEMP TABLE usage_days AS SELECT tenant_id, day, sum(input_tokens) AS i, "
        "sum(output_tokens) AS o, sum(runs) AS r FROM tenant_usage_daily GROUP BY 1, 2"
    )
    op.execute("DELETE FROM tenant_usage_daily")
    op.execute("ALTER TABLE tenant_usage_daily DROP CONSTRAINT tenant_usage_daily_pkey")
    op.execute("ALTER TABLE tenant_usage_daily DROP COLUMN shard")
    op.execute("ALTER TABLE tenant_usage_daily ADD PRIMARY KEY (tenant_id, day)")
    op.execute(
        "INSERT INTO tenant_usage_daily (tenant_id, day, input_tokens, output_tokens, runs) "
        "SELECT tenant_id, day, i, o, r FROM usage_days"
    )
    op.execute("DROP TABLE usage_days")
