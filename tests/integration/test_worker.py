"""The worker against the real Postgres, with a scripted executor standing in for the agent loop.

The executor records when each run starts and ends, so ordering and overlap are measured, not
assumed. (The real loop is exercised in test_loop.py and in the end-to-end tests.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from uuid import UUID

import pytest
from sqlalchemy import event, select, text

from app.auth.principal import Principal
from app.config import Settings
from app.db.engine import Database
from app.db.models import Run, RunEvent
from app.queue.lease import LeasedRun
from app.queue.manager import RunQueue
from app.worker.worker import Worker


class Script:
    """Executes runs by their message: `sleep:<s>` awaits, `block:<s>` blocks the event loop."""

    def __init__(self) -> None:
        self.spans: dict[UUID, tuple[float, float]] = {}
        self.started: dict[UUID, float] = {}
        self.calls: list[tuple[UUID, int]] = []

    async def __call__(self, leased: LeasedRun) -> None:
        run = leased.run
        self.calls.append((run.id, run.attempt))
        begin = time.monotonic()
        self.started[run.id] = begin
        message: str = run.input["message"]
        kind, _, arg = message.partition(":")
        if kind == "sleep":
            await asyncio.sleep(float(arg))
        elif kind == "block":
            time.sleep(float(arg))  # noqa: ASYNC251 -- deliberately starve the event loop
        self.spans[run.id] = (begin, time.monotonic())
        await leased.finish("completed", result={"text": message})


def settings_for(db_url: str, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "database_url": db_url,
        "lease_seconds": 3.0,
        "heartbeat_seconds": 0.5,
        "poll_seconds": 30.0,  # long: tests prove NOTIFY wakes the worker, not the poll
        "worker_concurrency": 8,
        "shutdown_grace_seconds": 0.5,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@asynccontextmanager
async def running_worker(
    database: Database, settings: Settings, script: Callable[[LeasedRun], object], worker_id: str
) -> AsyncIterator[Worker]:
    worker = Worker(database, settings, worker_id=worker_id, execute=script)  # type: ignore[arg-type]
    task = asyncio.create_task(worker.run())
    await asyncio.sleep(0.2)  # listener connected
    try:
        yield worker
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, 15)


async def wait_status(
    database: Database,
    who: Principal,
    run_id: UUID,
    statuses: set[str],
    timeout: float = 10,  # noqa: ASYNC109
) -> str:
    deadline = time.monotonic() + timeout
    while True:
        async with database.tenant(who) as s:
            status = await s.scalar(select(Run.status).where(Run.id == run_id))
        if status in statuses or time.monotonic() > deadline:
            assert status in statuses, f"run {run_id} is {status}, wanted {statuses}"
            return status
        await asyncio.sleep(0.05)


async def event_types(database: Database, who: Principal, run_id: UUID) -> list[str]:
    async with database.tenant(who) as s:
        rows = await s.scalars(
            select(RunEvent.type).where(RunEvent.run_id == run_id).order_by(RunEvent.seq)
        )
        return list(rows)


async def test_notify_starts_a_queued_run_in_milliseconds(
    database: Database, db_url: str, alice: Principal
) -> None:
    script = Script()
    queue = RunQueue(database)
    async with running_worker(database, settings_for(db_url), script, "w1"):
        enqueued_at = time.monotonic()
        run = await queue.enqueue_run(alice, message="hello")
        await wait_status(database, alice, run.run_id, {"completed"})
    latency = script.started[run.run_id] - enqueued_at
    assert latency < 0.5, f"run started {latency:.3f}s after enqueue (poll is 30 s)"
    assert await event_types(database, alice, run.run_id) == [
        "run.queued",
        "run.started",
        "run.completed",
    ]


async def test_lane_order_and_cross_session_parallelism(
    database: Database, db_url: str, alice: Principal
) -> None:
    script = Script()
    queue = RunQueue(database)
    lane = [
        await queue.enqueue_run(alice, message="sleep:0.3", session_key="lane") for _ in range(3)
    ]
    others = [
        await queue.enqueue_run(alice, message="sleep:0.3", session_key=f"other-{i}")
        for i in range(3)
    ]
    async with running_worker(database, settings_for(db_url), script, "w1"):
        for r in lane + others:
            await wait_status(database, alice, r.run_id, {"completed"})

    lane_spans = [script.spans[r.run_id] for r in lane]
    for (_, end), (begin, _) in zip(lane_spans, lane_spans[1:], strict=False):
        assert begin >= end, "two runs of one session overlapped"
    assert [script.started[r.run_id] for r in lane] == sorted(
        script.started[r.run_id] for r in lane
    )
    other_spans = [script.spans[r.run_id] for r in others]
    latest_start = max(b for b, _ in other_spans)
    earliest_end = min(e for _, e in other_spans)
    assert latest_start < earliest_end, "runs of different sessions did not overlap"


async def test_two_workers_never_run_one_session_twice(
    database: Database, db_url: str, alice: Principal
) -> None:
    script = Script()
    queue = RunQueue(database)
    runs = [await queue.enqueue_run(alice, message="sleep:0.1", session_key="s") for _ in range(6)]
    settings = settings_for(db_url)
    async with (
        running_worker(database, settings, script, "w1"),
        running_worker(database, settings, script, "w2"),
    ):
        for r in runs:
            await wait_status(database, alice, r.run_id, {"completed"})
    spans = sorted(script.spans[r.run_id] for r in runs)
    assert [script.started[r.run_id] for r in runs] == sorted(script.started.values())
    for (_, end), (begin, _) in zip(spans, spans[1:], strict=False):
        assert begin >= end


async def test_cancel_running_run_within_two_seconds_and_lane_moves_on(
    database: Database, db_url: str, alice: Principal
) -> None:
    script = Script()
    queue = RunQueue(database)
    long = await queue.enqueue_run(alice, message="sleep:30", session_key="c")
    nxt = await queue.enqueue_run(alice, message="quick", session_key="c")
    async with running_worker(database, settings_for(db_url), script, "w1"):
        await wait_status(database, alice, long.run_id, {"running"})
        asked = time.monotonic()
        assert await queue.cancel(alice, long.run_id) == "running"
        await wait_status(database, alice, long.run_id, {"cancelled"}, timeout=2)
        assert time.monotonic() - asked < 2
        await wait_status(database, alice, nxt.run_id, {"completed"})
    assert (await event_types(database, alice, long.run_id))[-1] == "run.cancelled"


async def test_heartbeat_survives_a_blocked_event_loop(
    database: Database, db_url: str, alice: Principal
) -> None:
    """A step that blocks the loop longer than the lease must not lose the lease."""
    script = Script()
    queue = RunQueue(database)
    settings = settings_for(db_url, lease_seconds=1.5, heartbeat_seconds=0.3)
    run = await queue.enqueue_run(alice, message="block:4", session_key="b")
    async with (
        running_worker(database, settings, script, "w1"),
        running_worker(database, settings, script, "w2"),
    ):
        await wait_status(database, alice, run.run_id, {"completed"}, timeout=15)
    assert script.calls == [(run.run_id, 1)], "the run was taken over while its worker was busy"


async def test_sigterm_hands_back_and_another_worker_resumes(
    database: Database, db_url: str, alice: Principal
) -> None:
    script = Script()
    queue = RunQueue(database)
    run = await queue.enqueue_run(alice, message="sleep:30", session_key="h")
    settings = settings_for(db_url)
    async with running_worker(database, settings, script, "w1") as w1:
        await wait_status(database, alice, run.run_id, {"running"})
        w1.request_stop()
        await wait_status(database, alice, run.run_id, {"queued"})
    assert (await event_types(database, alice, run.run_id))[-1] == "run.requeued"

    async with database.owner() as s:  # make the resumed attempt quick
        await s.execute(text('UPDATE agent_run_queue SET input = \'{"message": "quick"}\''))
    async with running_worker(database, settings, script, "w2"):
        await wait_status(database, alice, run.run_id, {"completed"})
    assert [a for _, a in script.calls] == [1, 2]
    types = await event_types(database, alice, run.run_id)
    assert types == [
        "run.queued",
        "run.started",
        "run.requeued",
        "run.resumed",
        "run.completed",
    ]


async def test_cancel_requested_before_claim_is_honoured(
    database: Database, db_url: str, alice: Principal
) -> None:
    script = Script()
    queue = RunQueue(database)
    run = await queue.enqueue_run(alice, message="never")
    assert await queue.cancel(alice, run.run_id) == "cancelled"
    async with running_worker(database, settings_for(db_url), script, "w1"):
        await asyncio.sleep(0.3)
    assert script.calls == []


@pytest.mark.parametrize("concurrency", [2])
async def test_concurrency_limit(
    database: Database, db_url: str, alice: Principal, concurrency: int
) -> None:
    script = Script()
    queue = RunQueue(database)
    runs = [
        await queue.enqueue_run(alice, message="sleep:0.3", session_key=f"k{i}") for i in range(4)
    ]
    settings = settings_for(db_url, worker_concurrency=concurrency)
    async with running_worker(database, settings, script, "w1"):
        for r in runs:
            await wait_status(database, alice, r.run_id, {"completed"})
    spans = [script.spans[r.run_id] for r in runs]
    for t in sorted(b for b, _ in spans):
        overlapping = sum(1 for b, e in spans if b <= t < e)
        assert overlapping <= concurrency


async def assert_gave_up(
    database: Database, alice: Principal, run_id: UUID, *, stops: int, limit: int, starts: list[str]
) -> None:
    """The run failed `worker_crashed` (naming both counts): its events are queued, the start
    event of each claim that ran it (`starts`), failed."""
    async with database.tenant(alice) as s:
        error = await s.scalar(select(Run.error).where(Run.id == run_id))
    assert error == {
        "code": "worker_crashed",
        "message": f"the run's worker stopped {stops} times (MAX_RUN_ATTEMPTS={limit}); giving up",
    }
    assert await event_types(database, alice, run_id) == ["run.queued", *starts, "run.failed"]


async def test_heartbeat_fails_a_run_whose_worker_keeps_dying_and_the_lane_moves_on(
    database: Database, db_url: str, alice: Principal
) -> None:
    """The run lost two workers (MAX_RUN_ATTEMPTS=2): a live worker's heartbeat fails it
    `worker_crashed` instead of taking it over, and runs the next message of its session."""
    script = Script()
    queue = RunQueue(database, max_run_attempts=2)
    run = await queue.enqueue_run(alice, message="kills its worker", session_key="oom")
    nxt = await queue.enqueue_run(alice, message="next", session_key="oom")
    assert await queue.claim_next("dead-1", 0.1) is not None
    await asyncio.sleep(0.2)
    assert await queue.recover_expired() == [run.run_id]  # the 1st stop: taken over
    assert await queue.claim_next("dead-2", 0.1) is not None  # ...by a worker that died too
    settings = settings_for(db_url, max_run_attempts=2, heartbeat_seconds=0.2)
    async with running_worker(database, settings, script, "w1"):
        assert await wait_status(database, alice, run.run_id, {"failed", "completed"}) == "failed"
        await wait_status(database, alice, nxt.run_id, {"completed"})
    assert script.calls == [(nxt.run_id, 1)]
    await assert_gave_up(
        database, alice, run.run_id, stops=2, limit=2, starts=["run.started", "run.resumed"]
    )


async def test_a_run_claimed_after_its_worker_stopped_max_times_is_failed_not_run(
    database: Database, db_url: str, alice: Principal
) -> None:
    """MAX_RUN_ATTEMPTS was lowered while a run that had already lost 3 workers was queued."""
    script = Script()
    queue = RunQueue(database)
    run = await queue.enqueue_run(alice, message="never", session_key="low")
    nxt = await queue.enqueue_run(alice, message="next", session_key="low")
    async with database.owner() as s:
        await s.execute(
            text("UPDATE agent_run_queue SET lease_expiries = 3 WHERE id = :id"),
            {"id": run.run_id},
        )
    async with running_worker(database, settings_for(db_url, max_run_attempts=2), script, "w1"):
        assert await wait_status(database, alice, run.run_id, {"failed", "completed"}) == "failed"
        await wait_status(database, alice, nxt.run_id, {"completed"})
    assert script.calls == [(nxt.run_id, 1)]
    await assert_gave_up(database, alice, run.run_id, stops=3, limit=2, starts=[])


async def test_one_claim_round_per_wake_up(
    database: Database, db_url: str, alice: Principal
) -> None:
    """An idle worker claims once at start and once on the enqueue's NOTIFY: the run's end adds
    no round (its lane is empty, so nothing is notified, and its claim had found nothing more),
    and no round is followed by a second statement for the collect windows (the claim reports
    them)."""
    script = Script()
    lane_reads: list[str] = []  # the claim, and formerly the windows' own statement

    def count(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if "queue_lanes" in statement:
            lane_reads.append(statement)

    worker_db = Database(db_url)
    event.listen(worker_db.engine.sync_engine, "before_cursor_execute", count)
    try:
        async with running_worker(worker_db, settings_for(db_url), script, "w1"):
            run = await RunQueue(database).enqueue_run(alice, message="hello")
            await wait_status(database, alice, run.run_id, {"completed"})
            await asyncio.sleep(0.3)
            rounds = len(lane_reads)
    finally:
        await worker_db.dispose()
    assert rounds == 2
