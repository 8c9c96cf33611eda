"""Idempotency keys: idempotency_keys (the first answer to a keyed request, per tenant and user).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

from pathlib import Path

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS idempotency_keys")
