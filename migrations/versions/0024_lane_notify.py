"""Workers are woken (agent_runtime_runs) by the lane sync, only when a lane is left claimable.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-24
"""

import re
from pathlib import Path

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")
_LANES = Path(__file__).with_name("0018_queue_lanes.sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    lanes = _LANES.read_text()
    function = re.search(r"CREATE FUNCTION agent_runtime_lane_sync\(\).*?\$\$;", lanes, re.S)
    assert function is not None
    op.get_bind().connection.driver_connection.execute(
        function.group(0).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    )
    op.execute(
        "CREATE TRIGGER agent_run_queue_notify_insert AFTER INSERT ON agent_run_queue "
        "FOR EACH ROW EXECUTE FUNCTION agent_runtime_notify_runs()"
    )
    op.execute(
        "CREATE TRIGGER agent_run_queue_notify_status AFTER UPDATE OF status ON agent_run_queue "
        "FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status AND (NEW.status = 'queued' "
        "OR OLD.status IN ('running', 'awaiting_approval', 'waiting'))) "
        "EXECUTE FUNCTION agent_runtime_notify_runs()"
    )
