"""Long-term memory: listing/document/embedder indexes, fillfactor, re-embed discovery policy.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from pathlib import Path

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    op.execute(
        """
        ALTER TABLE agent_memory_entries RESET (fillfactor);
        DROP POLICY IF EXISTS memory_reembed_discovery ON agent_memory_entries;
        REVOKE SELECT (tenant_id, embedder, embedding_dim) ON agent_memory_entries
          FROM agent_runtime_worker;
        DROP INDEX IF EXISTS agent_memory_entries_tenant_created, agent_memory_entries_document,
          agent_memory_entries_embedder;
        """
    )
