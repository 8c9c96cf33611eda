"""Streams benchmark: one API process serving thousands of concurrent SSE streams of live runs.

A fresh embedded Postgres (or DATABASE_URL's server, in a new database), one `python -m app.cli
api` process, and as many live runs as the largest step has streams (each in its own session,
spread over `--tenants` tenants), all claimed by a producer process (`producer.py`) that appends
`assistant.delta` events to them through the worker's fenced write (`LeasedRun.write`, so the
NOTIFY that wakes the API is the real trigger's). For each step of the ramp, client processes
(`client.py`, raw asyncio sockets) open one `GET /api/agent-runtime/stream` per run, resuming
after the run's last event; once every stream is up, the producer writes `--rate` events/s per
run for `--seconds`. Delivery delay = the client's wall clock at arrival − the event's stored
`ts` (`run_events.created_at`, the database's clock on the same machine). `created_at` is the
writing transaction's start, so that delay includes the producer's own write (its p99 is in the
table); "after commit" is the arrival − the event's commit time (`pg_xact_commit_timestamp`: the
bench turns on `track_commit_timestamp` in its embedded server), the part the API is answerable
for: the NOTIFY, the hub's read, the hand-over and the socket write.

    .venv/bin/python bench/streams/run.py --streams 100,500,1000,2000 --rate 1 --seconds 15

A real worker against a slow fake model cannot keep 2,000 runs live on a 2-core machine (that
is the concurrency bench's subject); the producer writes what such runs would, through the same
code path. The API's file-descriptor limit is raised to the hard limit before it starts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import httpx
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.auth.jwt import mint_token  # noqa: E402
from app.db.embedded import EmbeddedPostgres  # noqa: E402
from app.db.migrate import upgrade_to_head  # noqa: E402
from bench.common import connect, free_port, pct  # noqa: E402

SECRET = "bench-secret-0123456789abcdef0123456789abcdef"
HERE = Path(__file__).resolve().parent
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU ticks of the whole machine so far."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def _raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def _wait_ready(base: str, api: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if api.poll() is not None:
            raise SystemExit(f"the API exited (code {api.returncode}) before ready")
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"the API was not ready after {timeout:.0f} s")
        time.sleep(0.1)


def _token(tenant: int) -> str:
    return mint_token(SECRET, user_id=f"u{tenant}", tenant_id=f"t{tenant}")


async def _seed(base: str, runs: int, tenants: int) -> list[tuple[str, int]]:
    """Post `runs` runs, each in a new session, round-robin over tenants: (run id, tenant)."""
    out: list[tuple[str, int]] = [("", 0)] * runs
    gate = asyncio.Semaphore(32)
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:

        async def one(i: int) -> None:
            tenant = i % tenants
            async with gate:
                r = await client.post(
                    "/api/agent-runtime",
                    json={"message": f"stream {i}", "sessionKey": f"s{i}"},
                    headers={"Authorization": f"Bearer {_token(tenant)}"},
                )
            r.raise_for_status()
            out[i] = (r.json()["runId"], tenant)

        await asyncio.gather(*(one(i) for i in range(runs)))
    return out


def _expect(proc: subprocess.Popen[str], word: str, timeout: float) -> str:
    """The next stdout line of `proc`, which must start with `word`."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    line = proc.stdout.readline()
    if not line.startswith(word) or time.monotonic() > deadline:
        raise SystemExit(f"{proc.args!r} said {line!r} (exit {proc.poll()}), expected {word!r}")
    return line


def _settle(pid: int, idle_percent: float = 10.0, timeout: float = 120.0) -> None:
    """Until the API's CPU over the last second is below `idle_percent`: streams get their `200`
    before their catch-up read, so "every stream connected" is not yet "every stream live"."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = _cpu_seconds(pid)
        time.sleep(1.0)
        if (_cpu_seconds(pid) - before) * 100 < idle_percent:
            return


def _commit_times(
    ctx: dict[str, Any], run_ids: list[str], after: dict[str, int]
) -> dict[tuple[str, int], float]:
    """Each new event's commit time (Postgres's, epoch seconds), when the server tracks them;
    else the producer's wall clock once its commit returned (later than the commit by however
    long the producer took to resume)."""
    if ctx["commit_ts"]:
        with connect(ctx["url"]) as conn:
            rows = conn.execute(
                "SELECT e.run_id::text, e.seq, extract(epoch FROM pg_xact_commit_timestamp(e.xmin))"
                " FROM run_events e JOIN unnest(%s::uuid[], %s::bigint[]) AS w(run_id, after)"
                " ON e.run_id = w.run_id AND e.seq > w.after",
                (run_ids, [after[r] for r in run_ids]),
            ).fetchall()
        return {(run, int(seq)): float(t) for run, seq, t in rows if t is not None}
    commits = json.loads((ctx["dir"] / "commits.json").read_text())
    return {(run, seq): t for run, seq, t in commits}


def _step(
    ctx: dict[str, Any], streams: int, rate: float, seconds: float, clients: int
) -> dict[str, Any]:
    """One step of the ramp: `streams` streams, events at `rate`/s per run for `seconds`."""
    runs: list[tuple[str, int]] = ctx["runs"][:streams]
    with connect(ctx["url"]) as conn:
        last = dict(
            conn.execute(
                "SELECT id::text, last_event_seq FROM agent_run_queue WHERE id = ANY(%s::uuid[])",
                ([r for r, _ in runs],),
            ).fetchall()
        )
    procs: list[subprocess.Popen[str]] = []
    outs: list[Path] = []
    for c in range(clients):
        part = runs[c::clients]
        spec = {
            "host": "127.0.0.1",
            "port": ctx["port"],
            "streams": [[r, last[r], ctx["tokens"][t]] for r, t in part],
        }
        spec_path = ctx["dir"] / f"client{c}.json"
        spec_path.write_text(json.dumps(spec))
        outs.append(ctx["dir"] / f"client{c}.out.json")
        procs.append(
            subprocess.Popen(
                [sys.executable, str(HERE / "client.py"), str(spec_path), str(outs[-1])],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    connect_started = time.monotonic()
    for p in procs:
        _expect(p, "ready", 300)
    api_pid: int = ctx["api"].pid
    _settle(api_pid)
    connect_seconds = time.monotonic() - connect_started
    cpu0, busy0, wall0 = _cpu_seconds(api_pid), _machine_busy(), time.monotonic()
    producer: subprocess.Popen[str] = ctx["producer"]
    assert producer.stdin is not None
    commits_path = ctx["dir"] / "commits.json"
    producer.stdin.write(f"go {streams} {rate} {seconds} {commits_path}\n")
    producer.stdin.flush()
    _, written, elapsed, lag, write_p99 = _expect(producer, "done", seconds + 300).split()
    time.sleep(1.0)  # the last events' delivery
    cpu1, busy1, wall1 = _cpu_seconds(api_pid), _machine_busy(), time.monotonic()
    results = []
    for p, out in zip(procs, outs, strict=True):
        assert p.stdin is not None
        p.stdin.write("stop\n")
        p.stdin.flush()
        _expect(p, "done", 60)
        p.wait(30)
        results.append(json.loads(out.read_text()))
    delays = [d for r in results for d in r["delays_ms"]]
    committed = _commit_times(ctx, [r for r, _ in runs], last)
    after_commit = [
        (t - committed[(run, seq)]) * 1000
        for r in results
        for run, seq, t in r["arrivals"]
        if (run, seq) in committed
    ]
    return {
        "streams": streams,
        "connected": sum(r["connected"] for r in results),
        "failed": sum(r["failed"] for r in results),
        "connect_s": connect_seconds,
        "written": int(written),
        "write_rate": int(written) / float(elapsed),
        "producer_lag_ms": float(lag),
        "write_p99": float(write_p99),
        "received": sum(r["events"] for r in results),
        "gaps": sum(r["gaps"] for r in results),
        "delivered_rate": sum(r["events"] for r in results) / float(elapsed),
        "p50": pct(delays, 50),
        "p95": pct(delays, 95),
        "p99": pct(delays, 99),
        "max": max(delays, default=float("nan")),
        "c50": pct(after_commit, 50),
        "c99": pct(after_commit, 99),
        "api_cpu": (cpu1 - cpu0) / (wall1 - wall0) * 100,
        "machine_busy": (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]) * 100,
    }


def _bench(args: argparse.Namespace, server_url: str, data_dir: Path) -> list[dict[str, Any]]:
    with connect(server_url) as conn:
        conn.execute("DROP DATABASE IF EXISTS bench_streams WITH (FORCE)")
        conn.execute("CREATE DATABASE bench_streams")
    url = make_url(server_url).set(database="bench_streams").render_as_string(hide_password=False)
    upgrade_to_head(url)
    with connect(url) as conn:
        row = conn.execute("SHOW track_commit_timestamp").fetchone()
        commit_ts = row is not None and row[0] == "on"
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "SUPABASE_JWT_SECRET": SECRET,
        "PORT": str(port),
        "LOG_LEVEL": "WARNING",
        "AGENT_RUNTIME_DATA_DIR": str(data_dir),
        "SSE_KEEPALIVE_SECONDS": "15",
    }
    log: IO[bytes] = (data_dir / "bench.log").open("ab")
    api = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "api"], env=env, stdout=log, stderr=log, cwd=args.api_tree
    )
    producer: subprocess.Popen[str] | None = None
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_ready(base, api, timeout=60)
        top = max(args.streams)
        runs = asyncio.run(_seed(base, top, args.tenants))
        ids_path = data_dir / "runs.json"
        ids_path.write_text(json.dumps([r for r, _ in runs]))
        producer = subprocess.Popen(
            [sys.executable, str(HERE / "producer.py"), url, str(ids_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=ROOT,
        )
        _expect(producer, "ready", 300)
        ctx = {
            "url": url,
            "port": port,
            "api": api,
            "producer": producer,
            "runs": runs,
            "tokens": {t: _token(t) for t in range(args.tenants)},
            "dir": data_dir,
            "commit_ts": commit_ts,
        }
        steps = []
        for n in args.streams:
            steps.append(_step(ctx, n, args.rate, args.seconds, args.clients))
            print(_row(steps[-1]), file=sys.stderr, flush=True)
        return steps
    finally:
        for p in (producer, api):
            if p is None:
                continue
            if p is producer and p.stdin is not None:
                p.stdin.close()
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


HEADER = (
    "| streams | events/s written | write p99 (ms) | events/s delivered "
    "| delay p50 / p95 / p99 / max (ms) | after commit p50 / p99 (ms) | API CPU | machine busy "
    "| seq gaps | connect + settle (s) |\n|---|---|---|---|---|---|---|---|---|---|"
)


def _row(s: dict[str, Any]) -> str:
    failed = f" ({s['failed']} failed)" if s["failed"] else ""
    return (
        f"| {s['streams']}{failed} | {s['write_rate']:.0f} | {s['write_p99']:.0f} | "
        f"{s['delivered_rate']:.0f} | "
        f"{s['p50']:.1f} / {s['p95']:.1f} / {s['p99']:.1f} / {s['max']:.0f} | "
        f"{s['c50']:.1f} / {s['c99']:.1f} | "
        f"{s['api_cpu']:.0f} % | {s['machine_busy']:.0f} % | {s['gaps']} | {s['connect_s']:.1f} |"
    )


def _revision(tree: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--streams",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[100, 500, 1000, 2000],
        help="the ramp: streams per step (comma-separated)",
    )
    parser.add_argument("--rate", type=float, default=1.0, help="events/s per run")
    parser.add_argument("--seconds", type=float, default=15.0, help="seconds of events per step")
    parser.add_argument("--tenants", type=int, default=50, help="tenants the runs are spread over")
    parser.add_argument("--clients", type=int, default=2, help="SSE client processes")
    parser.add_argument(
        "--api-tree",
        type=Path,
        default=ROOT,
        help="run the API from this source tree (e.g. a `git worktree` of another revision, for "
        "an A/B in one sitting); the bench's producer and clients always run from this one",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the data directory (clients' arrivals, logs)"
    )
    args = parser.parse_args()
    fds = _raise_fd_limit()
    data_dir = Path(tempfile.mkdtemp(prefix="arts-", dir="/tmp"))
    pg = None
    server_url = os.environ.get("DATABASE_URL")
    finished = False
    try:
        if not server_url:
            pg = EmbeddedPostgres(data_dir)
            server_url = pg.start()
            with connect(server_url) as conn:  # commit times: a restart makes it take effect
                conn.execute("ALTER SYSTEM SET track_commit_timestamp = on")
            pg.stop()
            pg = EmbeddedPostgres(data_dir)
            server_url = pg.start()
        steps = _bench(args, server_url, data_dir)
        finished = True
    finally:
        if pg is not None:
            pg.stop()
        if finished and not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            print(f"(kept {data_dir}: the services' log is bench.log)", file=sys.stderr)
    print(
        f"\napi tree={args.api_tree} ({_revision(args.api_tree)}), "
        f"rate={args.rate} events/s per run, {args.seconds:.0f} s per step, "
        f"tenants={args.tenants}, client processes={args.clients}, fd limit={fds}\n"
    )
    print(HEADER)
    for s in steps:
        print(_row(s))


if __name__ == "__main__":
    main()
