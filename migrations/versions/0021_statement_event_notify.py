"""run_events NOTIFY once per statement (each run's highest seq), not once per row.

Revision ID: 0021
Revises: 0016
Create Date: 2026-11-24
"""

from pathlib import Path

from alembic import op

revision = "0021"
down_revision = "0016"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS run_events_notify ON run_events")
    op.execute("DROP FUNCTION IF EXISTS agent_runtime_notify_events()")
    op.execute(
        "CREATE TRIGGER run_events_notify AFTER INSERT ON run_events "
        "FOR EACH ROW EXECUTE FUNCTION agent_runtime_notify_event()"
    )
