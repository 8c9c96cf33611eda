"""Producer process of the streams bench: live runs whose events arrive at a steady rate.

Claims every queued run of the database as one fake worker (long lease), then on each
`go N RATE SECONDS OUT` line on stdin appends `assistant.delta` events to the first N runs (in the
order of the run-id file), RATE events/s per run with random phases, for SECONDS, through the
worker's own fenced write (`LeasedRun.write`: fence + seq allocation + insert in one tenant
transaction, so the `run_events` NOTIFY trigger fires exactly as for a real run). Prints
`ready` once the runs are claimed and, after each phase, `done <events written> <seconds>
<max lag ms> <write p99 ms>`; it writes `[run id, seq, wall clock after the commit]` of each
event into OUT (JSON).

    python bench/streams/producer.py DATABASE_URL RUN_IDS.json
"""

from __future__ import annotations

import asyncio
import heapq
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402

from app.core.events import AssistantDeltaEvent  # noqa: E402
from app.db.engine import Database  # noqa: E402
from app.queue.lease import LeasedRun  # noqa: E402
from app.queue.manager import RunQueue  # noqa: E402

WORKER_ID = "bench-streams-producer"
WRITERS = 16
"""Concurrent fenced writes (like a worker's slots)."""
TEXT = "lorem ipsum dolor sit amet, "


async def claim_all(queue: RunQueue) -> dict[str, LeasedRun]:
    """Claim every claimable run (one per session) as this producer."""
    runs: dict[str, LeasedRun] = {}
    while (claimed := await queue.claim_next(WORKER_ID, 3600)) is not None:
        runs[str(claimed.id)] = LeasedRun(queue.db, claimed, WORKER_ID)
    return runs


async def last_seqs(db: Database, runs: list[LeasedRun]) -> list[int]:
    """Each run's last event seq now (only this producer writes to them)."""
    async with db.owner() as s:
        rows = dict(
            (
                await s.execute(
                    text("SELECT id, last_event_seq FROM agent_run_queue WHERE id = ANY(:ids)"),
                    {"ids": [r.run.id for r in runs]},
                )
            ).all()
        )
    return [int(rows[r.run.id]) for r in runs]


async def phase(
    runs: list[LeasedRun], rate: float, seconds: float, seqs: list[int], commits: list[Any]
) -> tuple[int, float, float, float]:
    """Write `rate` events/s to each run for `seconds`: (events written, elapsed, max lag ms,
    p99 of a write's duration in ms: the most by which `created_at` precedes the commit).
    Appends `[run id, seq, wall clock after the commit]` to `commits` for every event."""
    start = time.monotonic()
    due = [(start + random.random() / rate, i) for i in range(len(runs))]
    heapq.heapify(due)
    todo: asyncio.Queue[int | None] = asyncio.Queue()
    written = 0
    max_lag = 0.0
    durations: list[float] = []

    async def writer() -> None:
        nonlocal written
        while (i := await todo.get()) is not None:
            started = time.perf_counter()
            await runs[i].emit(AssistantDeltaEvent(text=TEXT))
            committed = time.time()
            durations.append((time.perf_counter() - started) * 1000)
            seqs[i] += 1  # one event per write; writes to one run never overlap (rate ≪ 1/write)
            commits.append([str(runs[i].run.id), seqs[i], committed])
            written += 1

    writers = [asyncio.create_task(writer()) for _ in range(WRITERS)]
    end = start + seconds
    while due and due[0][0] < end:
        at, i = heapq.heappop(due)
        now = time.monotonic()
        if at > now:
            await asyncio.sleep(at - now)
        else:
            max_lag = max(max_lag, (now - at) * 1000)
        todo.put_nowait(i)
        heapq.heappush(due, (at + 1 / rate, i))
        if todo.qsize() > WRITERS * 4:  # behind: let the writers drain before scheduling more
            await asyncio.sleep(0.001)
    for _ in writers:
        todo.put_nowait(None)
    await asyncio.gather(*writers)
    durations.sort()
    p99 = durations[int(0.99 * (len(durations) - 1))] if durations else 0.0
    return written, time.monotonic() - start, max_lag, p99


async def main(url: str, order: list[str]) -> None:
    db = Database(url, pool_size=WRITERS, max_overflow=0)
    try:
        claimed = await claim_all(RunQueue(db))
        missing = [r for r in order if r not in claimed]
        if missing:
            raise SystemExit(f"{len(missing)} runs were not claimable")
        runs = [claimed[r] for r in order]
        print("ready", flush=True)
        loop = asyncio.get_running_loop()
        while line := (await loop.run_in_executor(None, sys.stdin.readline)).split():
            _go, n, rate, seconds, out = line
            chosen = runs[: int(n)]
            commits: list[Any] = []
            seqs = await last_seqs(db, chosen)
            written, elapsed, lag, p99 = await phase(
                chosen, float(rate), float(seconds), seqs, commits
            )
            await asyncio.get_running_loop().run_in_executor(
                None, Path(out).write_text, json.dumps(commits)
            )
            print(f"done {written} {elapsed:.3f} {lag:.1f} {p99:.1f}", flush=True)
    finally:
        await db.dispose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], json.loads(Path(sys.argv[2]).read_text())))
