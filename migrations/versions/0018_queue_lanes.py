"""The lane-head table (queue_lanes): the claim reads one row per session with queued or active
work instead of scanning the queued runs.

Revision ID: 0018
Revises: 0016
Create Date: 2026-11-24
"""

from pathlib import Path

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    op.execute(
        """
        DROP TRIGGER IF EXISTS agent_run_queue_lane_sync ON agent_run_queue;
        DROP TRIGGER IF EXISTS agent_run_queue_lane_sync_update ON agent_run_queue;
        DROP FUNCTION IF EXISTS agent_runtime_lane_sync();
        DROP TABLE IF EXISTS queue_lanes;
        DROP INDEX IF EXISTS agent_run_queue_queued_session;
        """
    )
