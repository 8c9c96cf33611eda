"""Idle enqueue → `run.started` latency: from a post's answer to its run's `run.started` event.

A fresh embedded Postgres (or DATABASE_URL's server), the API and one worker as subprocesses
(`python -m app.cli api|worker`, the offline model). One client posts to an existing session,
waits for the run to end, pauses (`--pause`, so the worker is idle again), and posts the next.

The latency is from the moment the client has the post's 202 answer (client clock) to the
`run.started` event's stored time (`run_events.created_at`, the server clock of the same host:
the start of the transaction that stored it). It is the time a client following the run would
wait, less the stream's own delivery (the SSE hub's lane). Also shown: `run.queued` →
`run.started` stored times (both server clock: the queue's part alone).

`--ab REV` runs the API and worker of git revision REV (a detached worktree in /tmp, its own
database) too, alternating block by block in the same sitting.

    .venv/bin/python bench/api/start.py --posts 100
    .venv/bin/python bench/api/start.py --posts 100 --ab 9acb540
"""

from __future__ import annotations

import argparse
import os
import shutil
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from post import ROOT, SECRET, Target, _env, _start, _stop, _wait_ready, _worktree

from app.auth.jwt import mint_token
from app.db.embedded import EmbeddedPostgres
from bench.common import connect, pct  # noqa: E402


@dataclass
class Side:
    """One API + worker under test, with its database connection and samples (seconds)."""

    api: Target
    worker: Target
    url: str = ""
    answer_to_started: list[float] = field(default_factory=list)
    queued_to_started: list[float] = field(default_factory=list)


def _start_worker(side: Side, data_dir: Path) -> None:
    env = _env(side.worker, side.url, data_dir)
    log = (data_dir / f"worker-{side.api.name}.log").open("ab")
    side.worker.proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "worker"],
        env=env,
        stdout=log,
        stderr=log,
        cwd=side.worker.code,
    )


_TIMES = """
SELECT extract(epoch FROM s.created_at), extract(epoch FROM s.created_at - q.created_at)
FROM run_events q JOIN run_events s ON s.run_id = q.run_id
WHERE q.run_id = %s AND q.type = 'run.queued' AND s.type = 'run.started'
"""
_ENDED = "SELECT status NOT IN ('queued', 'running') FROM agent_run_queue WHERE id = %s"


def _post_one(
    client: httpx.Client, conn: psycopg.Connection[Any], side: Side, key: str, record: bool
) -> None:
    r = client.post(f"{side.api.base}/api/agent-runtime", json={"message": "hi", "sessionKey": key})
    answered = time.time()
    if r.status_code != 202:
        raise SystemExit(f"{side.api.name}: {r.status_code} {r.text}")
    run_id = r.json()["runId"]
    deadline = time.monotonic() + 30
    while not conn.execute(_ENDED, (run_id,)).fetchone()[0]:  # type: ignore[index]
        if time.monotonic() > deadline:
            raise SystemExit(f"{side.api.name}: run {run_id} did not end in 30 s")
        time.sleep(0.005)
    row = conn.execute(_TIMES, (run_id,)).fetchone()
    if row is None:
        raise SystemExit(f"{side.api.name}: run {run_id} has no run.started event")
    if record:
        side.answer_to_started.append(float(row[0]) - answered)
        side.queued_to_started.append(float(row[1]))


def _row(label: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"| {label} | {pct(ms, 50):.2f} | {pct(ms, 95):.2f} | {pct(ms, 99):.2f} | {len(ms)} |"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--posts", type=int, default=100, help="timed posts per side")
    parser.add_argument("--warmup", type=int, default=10, help="untimed posts per side first")
    parser.add_argument("--block", type=int, default=20, help="posts per block (alternating)")
    parser.add_argument("--pause", type=float, default=0.2, help="idle seconds between posts")
    parser.add_argument("--ab", metavar="REV", help="also measure this git revision")
    args = parser.parse_args()

    sides = [Side(Target("head", ROOT), Target("head-worker", ROOT))]
    if args.ab:
        code = _worktree(args.ab)
        sides.append(Side(Target("base", code), Target("base-worker", code)))
    data_dir = Path(tempfile.mkdtemp(prefix="arts-", dir="/tmp"))
    pg = None
    server_url = os.environ.get("DATABASE_URL")
    conns: list[psycopg.Connection[Any]] = []
    try:
        if not server_url:
            pg = EmbeddedPostgres(data_dir / "pg")
            server_url = pg.start()
        for side in sides:
            _start(side.api, server_url, data_dir, None)
            db = f"bench_post_{side.api.name}"
            side.url = make_url(server_url).set(database=db).render_as_string(hide_password=False)
            _start_worker(side, data_dir)
        for side in sides:
            _wait_ready(side.api)
            conns.append(connect(side.url))
        time.sleep(1.0)  # the workers' LISTEN connections
        headers = {"Authorization": f"Bearer {mint_token(SECRET, user_id='bench')}"}
        with httpx.Client(headers=headers, timeout=30) as client:
            for side, conn in zip(sides, conns, strict=True):
                for _ in range(args.warmup):
                    _post_one(client, conn, side, f"start-{side.api.name}", record=False)
            done = 0
            while done < args.posts:
                size = min(args.block, args.posts - done)
                for side, conn in zip(sides, conns, strict=True):
                    for _ in range(size):
                        time.sleep(args.pause)
                        _post_one(client, conn, side, f"start-{side.api.name}", record=True)
                done += size
    finally:
        for conn in conns:
            conn.close()
        _stop([t for side in sides for t in (side.worker, side.api)])
        if pg is not None:
            pg.stop()
        shutil.rmtree(data_dir, ignore_errors=True)

    print(
        f"\nposts={args.posts} per side (warm-up {args.warmup}, {args.pause:.2f} s idle between)\n"
    )
    print("| code | latency | p50 (ms) | p95 (ms) | p99 (ms) | runs |")
    print("|---|---|---|---|---|---|")
    for side in sides:
        label = "this tree" if side.api.name == "head" else str(args.ab)
        print(_row(f"{label} | answer → run.started", side.answer_to_started))
        print(_row(f"{label} | run.queued → run.started", side.queued_to_started))


if __name__ == "__main__":
    main()
