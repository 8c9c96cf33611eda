"""Noisy neighbour: tenant B's start latency under tenant A's backlog, old claim order vs fair.

For each claim statement (`claim_next_fifo` of git revision 9acb540: the globally oldest
claimable run, the claim before fair claiming; `claim_runs` with limit 1: round-robin by tenant)
on a fresh database: tenant A's backlog is
bulk-inserted (`--backlog` queued runs over `--sessions` sessions), `--slots` worker slots claim
with that statement, hold each run `--run-ms` (the run's body is simulated: the claim, the
lane rules and the finish are the real SQL on the real Postgres) and finish it, while tenant B
posts `--b-runs` runs one at a time through `RunQueue.enqueue_run`, `--b-every-ms` apart. B's
start latency is its runs' `started_at - created_at` (database clock).

Then, on a `--explain-rows` backlog over 10 tenants, EXPLAIN ANALYZE of both claims (median of
`--explain-repeat` executions, each rolled back).

    .venv/bin/python bench/queue/noisy.py --backlog 1000 --slots 4 --run-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import TextClause, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.auth.principal import Principal  # noqa: E402
from app.db.embedded import EmbeddedPostgres  # noqa: E402
from app.db.engine import Database  # noqa: E402
from app.db.migrate import upgrade_to_head  # noqa: E402
from app.queue.manager import RunQueue  # noqa: E402
from app.queue.sql import query  # noqa: E402
from bench.common import connect, pct  # noqa: E402

A, B = "tenant-a", "tenant-b"
OLD_REVISION = "9acb540"
"""The last revision with the oldest-first claim (`claim_next_fifo`), before the lane table."""


def _old_fifo() -> TextClause:
    """`claim_next_fifo` as it was at OLD_REVISION (it reads only agent_run_queue: it still runs)."""
    source = subprocess.run(
        ["git", "show", f"{OLD_REVISION}:app/queue/queries.sql"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    body = source.split("-- name: claim_next_fifo\n", 1)[1].split("\n-- name: ", 1)[0]
    return text(body.strip())


VARIANTS = {"old (oldest first)": _old_fifo(), "fair (round-robin by tenant)": query("claim_runs")}
PARAMS = {"lease_seconds": 60, "limit": 1, "max_attempts": 5}

BACKLOG = text(
    """
    WITH agent AS (
      INSERT INTO agents (tenant_id, name) VALUES (:tenant, 'bulk') RETURNING id
    ), sessions AS (
      INSERT INTO agent_sessions (tenant_id, session_key, agent_id, user_id)
      SELECT :tenant, 'bulk-' || n, agent.id, 'u' FROM agent, generate_series(1, :sessions) n
      RETURNING id, agent_id
    )
    INSERT INTO agent_run_queue (tenant_id, session_id, agent_id, user_id, input)
    SELECT :tenant, s.id, s.agent_id, 'u', '{"message": "bulk"}'
    FROM sessions s, generate_series(1, :per_session)
    """
)
BUSY_LANES = text(
    """
    UPDATE agent_run_queue SET status = 'running', lease_owner = 'other',
      lease_expires_at = now() + interval '1 hour'
    WHERE id IN (SELECT DISTINCT ON (session_id) id FROM agent_run_queue
                 WHERE tenant_id = 'big' ORDER BY session_id, queue_seq)
    """
)
FINISH = text(
    "UPDATE agent_run_queue SET status = 'completed', finished_at = now(), lease_owner = NULL, "
    "lease_expires_at = NULL WHERE id = :id"
)


def _fresh_database(server_url: str, name: str) -> str:
    u = make_url(server_url)
    with connect(server_url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    url = u.set(database=name).render_as_string(hide_password=False)
    upgrade_to_head(url)
    return url


async def _backlog(db: Database, tenant: str, total: int, sessions: int) -> None:
    async with db.owner() as s:
        await s.execute(
            BACKLOG,
            {"tenant": tenant, "sessions": sessions, "per_session": max(1, total // sessions)},
        )


async def _claim(db: Database, statement: TextClause) -> Any:
    async with db.queue() as s:
        row = (await s.execute(statement, {"worker_id": "bench", **PARAMS})).first()
    return row if row is not None and row.id is not None else None  # claim_runs: a NULL row


async def _scenario(url: str, statement: TextClause, args: argparse.Namespace) -> dict[str, Any]:
    db = Database(url, pool_size=args.slots + 4)
    try:
        await _backlog(db, A, args.backlog, args.sessions)
        queue = RunQueue(db)
        b_posted = 0
        stop = asyncio.Event()

        async def slot() -> None:
            while not stop.is_set():
                try:
                    row = await _claim(db, statement)
                except Exception:  # noqa: BLE001 - a lost lane race (unique index): try again
                    row = None
                if row is None:
                    await asyncio.sleep(0.002)
                    continue
                await asyncio.sleep(args.run_ms / 1000)
                async with db.owner() as s:
                    await s.execute(FINISH, {"id": row.id})

        async def tenant_b() -> None:
            nonlocal b_posted
            b = Principal(user_id="b", tenant_id=B, role="owner")
            for i in range(args.b_runs):
                await queue.enqueue_run(b, message=f"b {i}", session_key=f"b-{i}")
                b_posted += 1
                await asyncio.sleep(args.b_every_ms / 1000)

        async def until_b_started() -> None:
            while True:
                async with db.owner() as s:
                    started = await s.scalar(
                        text(
                            "SELECT count(*) FROM agent_run_queue "
                            "WHERE tenant_id = :b AND started_at IS NOT NULL"
                        ),
                        {"b": B},
                    )
                if b_posted == args.b_runs and started == args.b_runs:
                    return
                await asyncio.sleep(0.05)

        slots = [asyncio.create_task(slot()) for _ in range(args.slots)]
        t0 = time.perf_counter()
        await asyncio.gather(tenant_b(), until_b_started())
        wall = time.perf_counter() - t0
        stop.set()
        await asyncio.gather(*slots)
        async with db.owner() as s:
            latencies = [
                float(v) * 1000
                for v in await s.scalars(
                    text(
                        "SELECT extract(epoch FROM started_at - created_at) FROM agent_run_queue "
                        "WHERE tenant_id = :b"
                    ),
                    {"b": B},
                )
            ]
            a_done = await s.scalar(
                text(
                    "SELECT count(*) FROM agent_run_queue WHERE tenant_id = :a AND status <> 'queued'"
                ),
                {"a": A},
            )
        return {"latencies": latencies, "a_started": int(a_done or 0), "wall": wall}
    finally:
        await db.dispose()


async def _explain(url: str, args: argparse.Namespace) -> dict[str, list[float]]:
    """Median execution and planning time of each claim over a backlog of `--explain-rows`."""
    db = Database(url)
    try:
        tenants = 10
        big = args.explain_rows * 9 // 10
        await _backlog(db, "big", big, big // 10)
        for i in range(tenants - 1):
            await _backlog(db, f"small-{i}", (args.explain_rows - big) // (tenants - 1), 10)
        async with db.owner() as s:
            await s.execute(text("ANALYZE agent_run_queue"))
            total = await s.scalar(text("SELECT count(*) FROM agent_run_queue"))
        print(f"\nEXPLAIN ANALYZE over {total} queued runs, {tenants} tenants")
        times: dict[str, list[float]] = {}
        for busy in (False, True):
            if busy:  # worst case: every lane of the big tenant busy, its 9,000 runs unclaimable
                async with db.owner() as s:
                    await s.execute(BUSY_LANES)
                    await s.execute(text("ANALYZE agent_run_queue"))
            for label, statement in VARIANTS.items():
                runs: list[tuple[float, float]] = []
                for _ in range(args.explain_repeat):
                    async with db.queue() as s:
                        plan = (
                            await s.execute(
                                text(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement.text}"),
                                {"worker_id": "x", **PARAMS},
                            )
                        ).scalar_one()
                        await s.rollback()
                    doc = plan if isinstance(plan, list) else json.loads(plan)
                    runs.append((doc[0]["Execution Time"], doc[0]["Planning Time"]))
                key = f"{label}{', big tenant: every lane busy' if busy else ''}"
                times[key] = [
                    statistics.median(r[0] for r in runs),
                    statistics.median(r[1] for r in runs),
                ]
        return times
    finally:
        await db.dispose()


async def _main(server_url: str, args: argparse.Namespace) -> None:
    results = {}
    for n, (label, statement) in enumerate(VARIANTS.items()):
        url = _fresh_database(server_url, f"bench_noisy_{n}")
        results[label] = await _scenario(url, statement, args)
    print(
        f"\nbacklog of A={args.backlog} runs over {args.sessions} sessions, slots={args.slots}, "
        f"run={args.run_ms} ms, B posts {args.b_runs} runs every {args.b_every_ms} ms\n"
    )
    print(
        "| claim order | B start p50 (ms) | B start p95 (ms) | B start max (ms) | A runs started by then |"
    )
    print("|---|---|---|---|---|")
    for label, r in results.items():
        lat = r["latencies"]
        print(
            f"| {label} | {pct(lat, 50):.1f} | {pct(lat, 95):.1f} | {max(lat):.1f} | "
            f"{r['a_started']} |"
        )
    url = _fresh_database(server_url, "bench_noisy_explain")
    times = await _explain(url, args)
    print("\n| claim | execution (ms, median) | planning (ms, median) |")
    print("|---|---|---|")
    for label, (execution, planning) in times.items():
        print(f"| {label} | {execution:.2f} | {planning:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--backlog", type=int, default=1000, help="tenant A's queued runs")
    parser.add_argument("--sessions", type=int, default=100, help="over this many sessions")
    parser.add_argument("--slots", type=int, default=4, help="worker slots claiming at once")
    parser.add_argument("--run-ms", type=int, default=20, help="how long a run holds its slot")
    parser.add_argument("--b-runs", type=int, default=20)
    parser.add_argument("--b-every-ms", type=int, default=100)
    parser.add_argument("--explain-rows", type=int, default=10_000)
    parser.add_argument("--explain-repeat", type=int, default=20)
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="artn-", dir="/tmp"))
    pg = None
    server_url = os.environ.get("DATABASE_URL")
    try:
        if not server_url:
            pg = EmbeddedPostgres(data_dir)
            server_url = pg.start()
        asyncio.run(_main(server_url, args))
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
