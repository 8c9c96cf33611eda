"""The workers' sweeps of sub-agent runs (called by every worker's heartbeat).

* `fail_overdue`: a run no worker holds (queued, parked awaiting approval or waiting) whose hard
  deadline (`deadline_at`, a sub-agent's `timeoutSeconds`) has passed is failed `run_timeout`
  (a running one is stopped by its own loop's deadline). The run-ended trigger then records the
  child as `timed_out` and tells its parent.
* `cancel_orphans`: the cancel of a parent reaches its children in the same transaction, except
  the ones a worker had locked at that moment (the trigger skips them rather than wait); this
  catches them a moment later: an idle one is cancelled, a running one asked to stop.

The worker role only finds WHICH runs (cross-tenant read); each is then changed in a transaction
as its tenant, under RLS, by a conditional UPDATE: two workers sweeping at once cannot both
change it, and the one that does writes its event.
"""

from __future__ import annotations

from uuid import UUID

from app.auth.principal import Principal
from app.core.events import RunCancelledEvent, RunFailedEvent
from app.core.events.base import EventError
from app.db.engine import Database
from app.queue.busy import close_approvals
from app.queue.event_log import emit_unleased
from app.queue.run_audit import run_cancelled, run_failed
from app.queue.sql import query

SWEEP_USER = "agent-runtime:subagent-sweep"
"""The `sub` of the tenant transactions the sweeps open."""
DEADLINE_MESSAGE = "the sub-agent did not finish within its timeoutSeconds"
PARENT_CANCELLED = "parent run cancelled"


async def fail_overdue(db: Database) -> list[UUID]:
    """Fail the idle runs past their `deadline_at` with `run_timeout`; the ones failed."""
    async with db.queue() as s:
        found = (await s.execute(query("overdue_runs"))).all()
    failed: list[UUID] = []
    for run_id, tenant_id in found:
        sweeper = Principal(user_id=SWEEP_USER, tenant_id=tenant_id, role="service")
        async with db.tenant(sweeper) as s:
            done = await s.scalar(
                query("fail_overdue"), {"run_id": run_id, "message": DEADLINE_MESSAGE}
            )
            if done is None:
                continue
            await close_approvals(s, run_id, DEADLINE_MESSAGE)
            error = EventError(code="run_timeout", message=DEADLINE_MESSAGE)
            await emit_unleased(s, run_id, tenant_id, [RunFailedEvent(error=error)])
            await run_failed(s, sweeper, run_id, error.model_dump())
        failed.append(run_id)
    return failed


async def cancel_orphans(db: Database) -> list[UUID]:
    """Cancel the live runs of cancelled parents the cancel did not reach; the ones changed."""
    async with db.queue() as s:
        found = (await s.execute(query("orphaned_runs"))).all()
    changed: list[UUID] = []
    for run_id, tenant_id in found:
        sweeper = Principal(user_id=SWEEP_USER, tenant_id=tenant_id, role="service")
        async with db.tenant(sweeper) as s:
            if await s.scalar(query("cancel_orphan"), {"run_id": run_id}) is not None:
                await close_approvals(s, run_id, PARENT_CANCELLED)
                await emit_unleased(
                    s, run_id, tenant_id, [RunCancelledEvent(reason=PARENT_CANCELLED)]
                )
                await run_cancelled(s, sweeper, run_id, stopping=False, reason=PARENT_CANCELLED)
            elif await s.scalar(query("request_cancel_running"), {"run_id": run_id}) is not None:
                await run_cancelled(s, sweeper, run_id, stopping=True, reason=PARENT_CANCELLED)
            else:
                continue
        changed.append(run_id)
    return changed
