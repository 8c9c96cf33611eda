"""The claim stores the run.started / run.resumed event (the worker role may insert only those).

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-24
"""

from pathlib import Path

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

_SQL = Path(__file__).with_suffix(".sql")


def upgrade() -> None:
    # Plain SQL straight to psycopg, like 0001 (see there).
    op.get_bind().connection.driver_connection.execute(_SQL.read_text())


def downgrade() -> None:
    op.execute("DROP POLICY IF EXISTS run_events_claim_started ON run_events")
    op.execute("REVOKE INSERT ON run_events FROM agent_runtime_worker")
