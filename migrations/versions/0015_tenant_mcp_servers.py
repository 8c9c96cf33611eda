"""MCP servers tenants attach as tool sources, header/env secrets encrypted (tenant_mcp_servers).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-24
"""

from pathlib import Path

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS tenant_mcp_servers")
