"""The lane-head table (queue_lanes): the claim reads one row per session with queued or active
work instead of scanning the queued runs; its sync wakes the workers when a lane is left
claimable.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-24
"""

from pathlib import Path

from alembic import op

revision = "0023"
down_revision = "0022"
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
        CREATE TRIGGER agent_run_queue_notify_insert AFTER INSERT ON agent_run_queue
          FOR EACH ROW EXECUTE FUNCTION agent_runtime_notify_runs();
        CREATE TRIGGER agent_run_queue_notify_status AFTER UPDATE OF status ON agent_run_queue
          FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                             AND (NEW.status = 'queued'
                                  OR OLD.status IN ('running', 'awaiting_approval', 'waiting')))
          EXECUTE FUNCTION agent_runtime_notify_runs();
        """
    )
