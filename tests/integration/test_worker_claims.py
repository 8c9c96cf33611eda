"""The claim loop under load: claims in parallel on a pool of their own, and no claim while the
runs already held use every pooled connection (`app.worker.admission`)."""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import text

from app.auth.principal import Principal
from app.db.engine import Database
from app.queue.lease import LeasedRun
from app.queue.manager import RunQueue
from app.worker.admission import Admission
from app.worker.worker import Worker
from tests.integration.test_worker import settings_for, wait_status


async def test_no_claim_while_the_runs_hold_every_pooled_connection(
    database: Database, db_url: str, alice: Principal
) -> None:
    runs_pool = Database(db_url, pool_size=1, max_overflow=0)
    claims_pool = Database(db_url, pool_size=2, max_overflow=0)
    holding, release = asyncio.Event(), asyncio.Event()

    async def execute(leased: LeasedRun) -> None:
        if leased.run.input["message"] == "hold":
            async with leased.db.owner() as s:  # the runs' only connection, until released
                await s.execute(text("SELECT 1"))
                holding.set()
                await release.wait()
        await leased.finish("completed", result={"text": "done"})

    settings = settings_for(db_url)
    worker = Worker(runs_pool, settings, worker_id="w-claims", execute=execute, claims=claims_pool)
    task = asyncio.create_task(worker.run())
    try:
        queue = RunQueue(database)
        held = await queue.enqueue_run(alice, message="hold", session_key="a")
        await asyncio.wait_for(holding.wait(), 10)
        waiting = await queue.enqueue_run(alice, message="next", session_key="b")
        await asyncio.sleep(0.5)  # woken by its NOTIFY, the claim loop holds back (and retries)
        assert await wait_status(database, alice, waiting.run_id, {"queued"}, timeout=0) == "queued"
        release.set()
        for run in (held, waiting):
            await wait_status(database, alice, run.run_id, {"completed"})
    finally:
        release.set()
        worker.request_stop()
        await asyncio.wait_for(task, 15)
        await runs_pool.dispose()
        await claims_pool.dispose()


async def test_a_late_event_loop_counts_as_saturated(database: Database) -> None:
    admission = Admission(database, max_lag=0.1)
    watcher = asyncio.create_task(admission.watch())
    try:
        await asyncio.sleep(0.1)
        assert not admission.saturated()
        time.sleep(0.3)  # noqa: ASYNC251 -- a run hogging the loop
        await asyncio.sleep(0.06)  # the probe wakes, late
        assert admission.lag > 0.1
        assert admission.saturated()
    finally:
        watcher.cancel()
