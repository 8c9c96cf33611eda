"""What the metrics scrape reads from the database: queue depth and pending approvals.

Cross-tenant counts, read as the worker role (it sees the queue's status columns and the
approvals' status and age, nothing else); no tenant id leaves this module.
"""

from __future__ import annotations

from sqlalchemy import text

from app.db.engine import Database
from app.observability.metrics import DatabaseGauges

# Only the live statuses: finished runs pile up forever (count them with
# agent_runtime_run_duration_seconds_count), and the live ones are few and indexed.
_RUNS_BY_STATUS = text(
    "SELECT status, count(*) AS n FROM agent_run_queue "
    "WHERE status IN ('queued', 'running', 'awaiting_approval', 'waiting') GROUP BY status"
)
# Only claimable runs: a debounced one (`not_before` ahead) is not waiting on the workers yet.
_OLDEST_QUEUED = text(
    "SELECT coalesce(extract(epoch FROM now() - min(coalesce(not_before, created_at))), 0) "
    "FROM agent_run_queue WHERE status = 'queued' AND (not_before IS NULL OR not_before <= now())"
)
_PENDING_APPROVALS = text(
    "SELECT count(*) AS n, coalesce(extract(epoch FROM now() - min(created_at)), 0) AS oldest "
    "FROM tool_approvals WHERE status = 'pending'"
)

LIVE_STATUSES = ("queued", "running", "awaiting_approval", "waiting")
"""Every live status, reported even at 0 so that a series never disappears."""


async def database_gauges(db: Database) -> DatabaseGauges:
    """Queue depth by status, the oldest claimable run's age, pending approvals and the oldest
    one's age, in one read-only transaction."""
    async with db.queue() as s:
        rows = (await s.execute(_RUNS_BY_STATUS)).all()
        oldest_queued = await s.scalar(_OLDEST_QUEUED)
        approvals = (await s.execute(_PENDING_APPROVALS)).one()
    by_status = dict.fromkeys(LIVE_STATUSES, 0)
    by_status.update({str(r.status): int(r.n) for r in rows})
    return DatabaseGauges(
        runs_by_status=by_status,
        oldest_queued_seconds=float(oldest_queued or 0),
        approvals_pending=int(approvals.n),
        oldest_approval_seconds=float(approvals.oldest or 0),
    )
