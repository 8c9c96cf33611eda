"""Tool policy and approvals: tool_approvals, tool_trust, inheritable agent profiles.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from pathlib import Path

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    op.execute(
        """
        ALTER TABLE tool_executions DROP CONSTRAINT IF EXISTS tool_executions_approval_fkey;
        UPDATE tool_executions SET status = 'interrupted' WHERE status = 'awaiting_approval';
        ALTER TABLE tool_executions DROP CONSTRAINT tool_executions_status_check;
        ALTER TABLE tool_executions ADD CONSTRAINT tool_executions_status_check
          CHECK (status IN ('started', 'completed', 'failed', 'interrupted'));
        DROP TABLE IF EXISTS tool_trust, tool_approvals;
        ALTER TABLE agent_tool_policies DROP CONSTRAINT IF EXISTS agent_tool_policies_caps;
        ALTER TABLE agent_tool_policies DROP CONSTRAINT IF EXISTS agent_tool_policies_tenant_profile;
        UPDATE agent_tool_policies SET profile = 'coding' WHERE profile IS NULL;
        ALTER TABLE agent_tool_policies ALTER COLUMN profile SET NOT NULL;
        """
    )
