"""Concurrency benchmark: N concurrent runs in ONE worker process against a slow model.

For each N (default 10, 100, 1000), on a fresh database of one embedded Postgres: a fake
OpenAI-compatible model (`fake_model.py`, its own process) that streams every answer in chunks
over 2 s, each chunk stamped with the time it was sent; one `agent-runtime api` and one
`agent-runtime worker` with `WORKER_CONCURRENCY` = the largest N, configured to use it
(`DEFAULT_MODEL=openai:slow`, `OPENAI_BASE_URL`). The worker is started, waits until ready, and
is then paused (SIGSTOP) while N runs are posted in N sessions and one SSE stream per run is
opened; it is resumed (SIGCONT) and the bench waits for every run to finish. So every run is
claimable at once: the claim loop has to fill N free slots, and the N runs overlap if the worker
keeps up.

Reported per N: delivery latency p50/p95/p99 from the model's send stamp to the SSE client
receiving the `assistant.delta` that carries it, and to the event's row (`created_at`, the
writing transaction's start), the worker's CPU seconds per run (utime+stime from
/proc/<pid>/stat, from the pause to the last run's end) and the API's, the worker's peak
resident memory (VmHWM), the database's commits per run (worker, heartbeat and the API's SSE
reads together), runs/s, the most runs `running` at once (from the stored `run.started` and
terminal events), and how long the claim loop took to start all N (runs not finished after
`--timeout` show in the statuses). `--no-streams` opens no SSE stream: the worker's side alone,
without the API's fan-out competing for the same cores.

    .venv/bin/python bench/concurrency/run.py --runs 10,100,1000
    .venv/bin/python bench/concurrency/run.py --runs 10,1000 --rev main   # A/B in one sitting
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.auth.jwt import mint_token  # noqa: E402
from app.db.embedded import EmbeddedPostgres  # noqa: E402
from bench.common import connect, free_port, pct  # noqa: E402

SECRET = "bench-secret-0123456789abcdef0123456789abcdef"
STAMP = re.compile(rb"\[t=(\d+\.\d+)\]")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid` (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ---------------------------------------------------------------------------- SSE clients


@dataclass
class Streams:
    """What the SSE clients saw: per-chunk delivery latencies and per-run outcomes."""

    latencies: list[float] = field(default_factory=list)
    opened: int = 0
    completed: int = 0
    failed: int = 0
    all_open: asyncio.Event = field(default_factory=asyncio.Event)


async def _follow(port: int, token: str, run_id: str, n: int, out: Streams) -> None:
    """One SSE stream, read raw over HTTP/1.0 (the response ends with the connection): every
    `[t=…]` stamp received in an `assistant.delta` is a delivery latency. No SSE or JSON parser:
    the bench's own CPU stays small with 1,000 streams."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    writer.write(
        f"GET /api/agent-runtime/stream?runId={run_id} HTTP/1.0\r\nHost: bench\r\n"
        f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    counted = False
    pending = b""
    completed = False
    try:
        while data := await reader.read(65536):
            now = time.time()
            if not counted:
                counted = True
                out.opened += 1
                if out.opened == n:
                    out.all_open.set()
            # Whole frames only: the stamps also come back inside `assistant.message` and the
            # run's result, which are not deliveries of the chunk.
            *frames, pending = (pending + data).split(b"\r\n\r\n")
            for frame in frames:
                if b"event: assistant.delta" in frame:
                    out.latencies += [now - float(t) for t in STAMP.findall(frame)]
                elif b"event: run.completed" in frame:
                    completed = True
    finally:
        writer.close()
    if completed:
        out.completed += 1
    else:
        out.failed += 1
        if not counted:
            out.opened += 1
            if out.opened == n:
                out.all_open.set()


# ---------------------------------------------------------------------------- one N


@dataclass
class Result:
    """One N's measurements."""

    n: int
    sse: list[float]
    stored: list[float]
    worker_cpu: float
    worker_rss: float
    commits: int
    api_cpu: float
    wall: float
    max_running: int
    fill: float
    completed_streams: int
    statuses: dict[str, int]


def _spawn(args: list[str], env: dict[str, str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    out = log.open("ab")
    return subprocess.Popen(args, env=env, stdout=out, stderr=out, cwd=cwd)


def _wait_for(predicate: Any, what: str, timeout: float, procs: list[Any]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        for p in procs:
            if p.poll() is not None:
                raise SystemExit(f"{p.args!r} exited with {p.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


async def _post_and_open(
    base: str, port: int, n: int, clients: int, open_streams: bool
) -> tuple[Streams, Any]:
    token = mint_token(SECRET, user_id="bench")
    headers = {"Authorization": f"Bearer {token}"}
    run_ids: list[str] = []
    sem = asyncio.Semaphore(clients)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:

        async def post(i: int) -> None:
            async with sem:
                r = await client.post(
                    "/api/agent-runtime",
                    json={"message": f"concurrency {i}", "sessionKey": f"conc-{n}-{i}"},
                )
                r.raise_for_status()
                run_ids.append(r.json()["runId"])

        await asyncio.gather(*(post(i) for i in range(n)))
    streams = Streams()
    if not open_streams:
        return streams, None
    opening = asyncio.Semaphore(clients)

    async def follow(run_id: str) -> None:
        async with opening:  # open them at a bounded rate; each then runs on its own
            pass
        await _follow(port, token, run_id, n, streams)

    tasks = asyncio.gather(*(follow(r) for r in run_ids))
    await asyncio.wait_for(streams.all_open.wait(), timeout=120)
    return streams, tasks


def _commits(url: str) -> int:
    """Transactions committed in the bench's database so far (pg_stat_database; the stats are
    flushed lazily, so this is close, not exact)."""
    with connect(url) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _wait_finished(url: str, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with connect(url) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM agent_run_queue "
                "WHERE status IN ('completed', 'failed', 'cancelled')"
            ).fetchone()
            if row is not None and row[0] >= n:
                return
            time.sleep(0.05)
    raise TimeoutError("the runs did not finish in time")


async def _measure(
    args: argparse.Namespace, url: str, base: str, port: int, n: int, worker: int, api: int
) -> Any:
    streams, tasks = await _post_and_open(base, port, n, args.clients, not args.no_streams)
    cpu_w, cpu_a = _cpu_seconds(worker), _cpu_seconds(api)
    commits = await asyncio.to_thread(_commits, url)
    began = time.monotonic()
    os.kill(worker, signal.SIGCONT)
    # Past --timeout the row reports what finished (its statuses say how many did not).
    with contextlib.suppress(TimeoutError):
        if tasks is None:
            await asyncio.to_thread(_wait_finished, url, n, args.timeout)
        else:
            await asyncio.wait_for(tasks, timeout=args.timeout)
    wall = time.monotonic() - began
    commits = await asyncio.to_thread(_commits, url) - commits
    cpu = _cpu_seconds(worker) - cpu_w, _cpu_seconds(api) - cpu_a
    return streams, *cpu, wall, commits, _peak_rss_mb(worker)


def _stored(conn: psycopg.Connection[Any]) -> tuple[list[float], int, float, dict[str, int]]:
    stored: list[float] = []
    for created, text in conn.execute(
        "SELECT extract(epoch FROM created_at)::float8, data->>'text' FROM run_events "
        "WHERE type = 'assistant.delta'"
    ):
        stored += [created - float(m) for m in STAMP.findall(text.encode())]
    marks = conn.execute(
        "SELECT extract(epoch FROM created_at)::float8, type FROM run_events "
        "WHERE type IN ('run.started', 'run.completed', 'run.failed', 'run.cancelled')"
    ).fetchall()
    running = peak = 0
    for _, kind in sorted(marks, key=lambda m: (m[0], m[1] == "run.started")):
        running += 1 if kind == "run.started" else -1
        peak = max(peak, running)
    starts = [t for t, kind in marks if kind == "run.started"]
    fill = max(starts) - min(starts) if starts else float("nan")
    statuses = dict(conn.execute("SELECT status, count(*) FROM agent_run_queue GROUP BY 1"))
    return stored, peak, fill, statuses


def _one(args: argparse.Namespace, server_url: str, data_dir: Path, src: Path, n: int) -> Result:
    db = f"bench_conc_{n}"
    with connect(server_url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {db}")
    url = make_url(server_url).set(database=db).render_as_string(hide_password=False)
    port, model_port = free_port(), free_port()
    log = data_dir / f"bench-{n}.log"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "SUPABASE_JWT_SECRET": SECRET,
        "PORT": str(port),
        "WORKER_CONCURRENCY": str(args.concurrency),
        "LOG_LEVEL": "WARNING",
        "AGENT_RUNTIME_DATA_DIR": str(data_dir),
        "OPENAI_BASE_URL": f"http://127.0.0.1:{model_port}/v1",
        "DEFAULT_MODEL": "openai:slow",
        "MODEL_MAX_RETRIES": "0",
        "PYTHONPATH": str(src),
    }
    cli = [sys.executable, "-m", "app.cli"]
    subprocess.run([*cli, "migrate"], env=env, cwd=src, check=True, capture_output=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        fake = [sys.executable, str(Path(__file__).with_name("fake_model.py"))]
        model_args = ["--port", str(model_port), "--seconds", str(args.model_seconds)]
        model_args += ["--chunks", str(args.chunks)]
        procs.append(_spawn([*fake, *model_args], env, log, src))
        api = _spawn([*cli, "api"], env, log, src)
        procs.append(api)
        worker_log = data_dir / f"worker-{n}.log"
        profiler = Path(__file__).with_name("profile_worker.py")
        worker_cmd = [*cli, "worker"]
        if args.profile:
            worker_cmd = [sys.executable, str(profiler), str(args.profile.with_suffix(f".{n}"))]
        worker = _spawn(worker_cmd, {**env, "LOG_LEVEL": "INFO"}, worker_log, src)
        procs.append(worker)
        base = f"http://127.0.0.1:{port}"
        _wait_for(lambda: _ready(base), "the API", 60, procs)
        _wait_for(lambda: b"worker started" in worker_log.read_bytes(), "the worker", 60, procs)
        time.sleep(1.0)  # its LISTEN connection and first (empty) claim
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            streams, worker_cpu, api_cpu, wall, commits, worker_rss = asyncio.run(
                _measure(args, url, base, port, n, worker.pid, api.pid)
            )
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGCONT)
        with connect(url) as conn:
            stored, peak, fill, statuses = _stored(conn)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    return Result(
        n=n,
        sse=streams.latencies,
        stored=stored,
        worker_cpu=worker_cpu,
        worker_rss=worker_rss,
        commits=commits,
        api_cpu=api_cpu,
        wall=wall,
        max_running=peak,
        fill=fill,
        completed_streams=streams.completed,
        statuses=statuses,
    )


# ---------------------------------------------------------------------------- report


def _ms(values: list[float]) -> str:
    return " / ".join(f"{pct(values, p) * 1000:.0f}" for p in (50, 95, 99))


def _header(label: str) -> None:
    print(f"\n{label}\n")
    print(
        "| N | model→SSE client p50 / p95 / p99 (ms) | model→stored p50 / p95 / p99 (ms) | "
        "worker CPU s/run | worker peak RSS (MB) | API CPU s/run | transactions/run | runs/s | max running | "
        "all N started within (s) | "
        "statuses |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|", flush=True)


def _row(r: Result) -> None:
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(r.statuses.items()))
    print(
        f"| {r.n} | {_ms(r.sse)} | {_ms(r.stored)} | {r.worker_cpu / r.n:.4f} | {r.worker_rss:.0f} | "
        f"{r.api_cpu / r.n:.4f} | {r.commits / r.n:.1f} | {r.n / r.wall:.1f} | "
        f"{r.max_running} | {r.fill:.2f} | "
        f"{statuses}; {r.completed_streams} streams ended with run.completed |",
        flush=True,
    )


def _source(rev: str, tree: Path) -> Path:
    """A detached worktree of `rev` (its services run from there, on this tree's venv)."""
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev],
        check=True,
        capture_output=True,
    )
    return tree


def _short(rev: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", rev], capture_output=True, text=True
    )
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", default="10,100,1000", help="comma-separated N values")
    parser.add_argument(
        "--concurrency", type=int, default=1000, help="WORKER_CONCURRENCY of the one worker"
    )
    parser.add_argument("--model-seconds", type=float, default=2.0)
    parser.add_argument("--chunks", type=int, default=20, help="text chunks per model answer")
    parser.add_argument(
        "--timeout", type=float, default=900, help="seconds to wait for one N's runs to finish"
    )
    parser.add_argument("--clients", type=int, default=32, help="concurrent POSTs / stream opens")
    parser.add_argument(
        "--rev",
        action="append",
        default=[],
        help="also measure this git revision's code first (repeatable; A/B in one sitting)",
    )
    parser.add_argument("--no-tree", action="store_true", help="measure only the --rev(s)")
    parser.add_argument(
        "--no-streams",
        action="store_true",
        help="open no SSE streams (the worker alone: no API fan-out load; SSE columns empty)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="run the worker under cProfile (CPU time), writing its stats to PROFILE.<N>",
    )
    args = parser.parse_args()
    ns = [int(x) for x in args.runs.split(",")]

    data_dir = Path(tempfile.mkdtemp(prefix="artc-", dir="/tmp"))
    pg = EmbeddedPostgres(data_dir)
    server_url = os.environ.get("DATABASE_URL") or pg.start()
    finished = False
    try:
        with connect(server_url) as conn:
            conn.execute("ALTER SYSTEM SET max_connections = 300")
        pg.stop()
        server_url = os.environ.get("DATABASE_URL") or pg.start()
        labels: list[tuple[str | None, Path]] = [
            (rev, _source(rev, data_dir / f"rev{i}")) for i, rev in enumerate(args.rev)
        ]
        if not args.no_tree:
            labels.append((None, ROOT))
        for rev, src in labels:
            what = f"revision {rev} ({_short(rev)})" if rev else "this tree"
            _header(
                f"{what}: one worker, WORKER_CONCURRENCY={args.concurrency}, model answers "
                f"{args.model_seconds:g} s in {args.chunks} chunks"
            )
            for n in ns:
                _row(_one(args, server_url, data_dir, src, n))
        finished = True
    finally:
        for i in range(len(args.rev)):
            subprocess.run(
                [
                    "git",
                    "-C",
                    str(ROOT),
                    "worktree",
                    "remove",
                    "--force",
                    str(data_dir / f"rev{i}"),
                ],
                check=False,
                capture_output=True,
            )
        pg.stop()
        if finished:
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            print(f"(kept {data_dir}: the services' logs are *.log)", file=sys.stderr)


if __name__ == "__main__":
    main()
