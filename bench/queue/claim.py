"""The bare claim: claim + finish throughput against pgqueuer's, and the claim's cost against
backlog and history. Everything on one fresh embedded Postgres (or the server in DATABASE_URL),
each part in a fresh database of it, in one sitting.

(a) Throughput: `--jobs` queued runs over `--sessions` sessions of `--tenants` tenants are
    bulk-inserted; `--consumers` asyncio consumers each claim up to `--batch` runs per statement
    (`RunQueue.claim_batch`, as the worker does, through the app's `Database`) and finish each
    in its own tenant transaction with the worker's `finish_run` statement (concurrently, as a
    worker's run tasks would). Afterwards it checks that every run completed after exactly one
    claim and that each session's runs were claimed in queue order (the claim order each
    consumer observed, which per session is causal: a lane's next run is claimable only once
    its previous run's finish committed). Then the same on bare asyncpg: the same two
    statements prepared, the claim in one round trip as the worker role, each finish in its
    tenant's transaction (BEGIN, role and claims, finish_run, COMMIT): the queue's SQL without
    the app's database layer (SQLAlchemy, the pool's pre-ping); and once more with the finishes
    of each claimed batch in one transaction (one commit per batch, as pgqueuer buffers its
    completions): what the per-run commit costs.
(b) pgqueuer: the same number of no-op jobs drained by as many pgqueuer consumers with the same
    batch size (its benchmark's drain strategy: `tools/benchmark.py --strategy drain`), in a
    throwaway venv (`--pgq-venv`, created with pip install pgqueuer asyncpg uvloop if missing;
    never a project dependency), as a subprocess, on its own database of the same server.
(c) Claim cost: an empty claim (every lane busy) at 400 and at 40,000 queued runs (10 per
    session, 10 tenants), and a claim in a session with 1,000 finished runs and with 3: the
    median wall time of `RunQueue.claim_next` (its transaction and commit, the lane trigger
    included) over `--repeat` claims after a VACUUM ANALYZE, and the median EXPLAIN ANALYZE
    execution time of the claim statement alone (rolled back); the same statements of git
    revision `--against` (the claim before the lane-head table) are explained beside it.

    .venv/bin/python bench/queue/claim.py --jobs 10000 --sessions 1000 --repeat 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import defaultdict
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from sqlalchemy import text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.auth.principal import Principal  # noqa: E402
from app.db.embedded import EmbeddedPostgres  # noqa: E402
from app.db.engine import Database  # noqa: E402
from app.db.migrate import upgrade_to_head  # noqa: E402
from app.queue.manager import ClaimedRun, RunQueue  # noqa: E402
from app.queue.sql import query  # noqa: E402
from bench.common import connect  # noqa: E402

BACKLOG = text(
    """
    WITH agent AS (
      INSERT INTO agents (tenant_id, name) VALUES (:tenant, 'bulk') RETURNING id
    ), sessions AS (
      INSERT INTO agent_sessions (tenant_id, session_key, agent_id, user_id)
      SELECT :tenant, :prefix || n, agent.id, 'u' FROM agent, generate_series(1, :sessions) n
      RETURNING id, agent_id
    )
    INSERT INTO agent_run_queue (tenant_id, session_id, agent_id, user_id, input, status,
                                 finished_at)
    SELECT :tenant, s.id, s.agent_id, 'u', '{"message": "bulk"}', :status,
           CASE WHEN :status = 'completed' THEN now() END
    FROM sessions s, generate_series(1, :per_session)
    """
)
BUSY_EVERY_LANE = text(
    """
    UPDATE agent_run_queue SET status = 'running', lease_owner = 'other',
      lease_expires_at = now() + interval '1 hour'
    WHERE id IN (SELECT DISTINCT ON (session_id) id FROM agent_run_queue
                 WHERE status = 'queued' ORDER BY session_id, queue_seq)
    """
)
REQUEUE = text(
    "UPDATE agent_run_queue SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL "
    "WHERE id = :id"
)
SET_TENANT = (
    "SELECT set_config('role', 'agent_runtime_app', true), "
    "set_config('request.jwt.claims', $1, true)"
)
_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)

PGQ_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys, time
    import asyncpg
    from pgqueuer import PgQueuer
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.models import Job
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    JOBS, CONSUMERS, BATCH = (int(a) for a in sys.argv[1:4])

    async def main() -> None:
        conn = await asyncpg.connect()
        setup = Queries(AsyncpgDriver(conn))
        await setup.install()
        for start in range(0, JOBS, 10_000):
            n = min(10_000, JOBS - start)
            await setup.enqueue(["fetch"] * n, [b""] * n, [0] * n)
        pgqs = []
        for _ in range(CONSUMERS):
            pgq = PgQueuer(AsyncpgDriver(await asyncpg.connect()))

            @pgq.entrypoint("fetch")
            async def fetch(job: Job) -> None:
                pass

            pgqs.append(pgq)
        began = time.perf_counter()
        await asyncio.gather(
            *(p.run(batch_size=BATCH, mode=QueueExecutionMode.drain) for p in pgqs)
        )
        wall = time.perf_counter() - began
        left = await conn.fetchval("SELECT count(*) FROM pgqueuer WHERE status = 'queued'")
        print(json.dumps({"jobs": JOBS, "wall": wall, "left": left}))

    try:
        import uvloop
        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
    """
)


def _fresh_database(server_url: str, name: str, *, migrate: bool = True) -> str:
    with connect(server_url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    if migrate:
        upgrade_to_head(url)
    return url


def _vacuum(url: str) -> None:
    """VACUUM ANALYZE the database (as autovacuum would have by then): the setup's updates
    leave dead entries in the partial indexes, which a claim would otherwise step over."""
    u = make_url(url)
    with psycopg.connect(
        dbname=u.database,
        user=u.username,
        password=u.password,
        host=u.host or u.query.get("host"),  # type: ignore[arg-type]
        port=u.port,
        autocommit=True,
    ) as conn:
        conn.execute("VACUUM ANALYZE")


async def _backlog(
    db: Database,
    tenant: str,
    sessions: int,
    per_session: int,
    *,
    prefix: str = "bulk-",
    status: str = "queued",
) -> None:
    async with db.owner() as s:
        await s.execute(
            BACKLOG,
            {
                "tenant": tenant,
                "sessions": sessions,
                "per_session": per_session,
                "prefix": prefix,
                "status": status,
            },
        )


# ---------------------------------------------------------------- (a) claim + finish throughput


async def _throughput(url: str, args: argparse.Namespace) -> dict[str, Any]:
    db = Database(url, pool_size=args.consumers * (args.batch + 1), max_overflow=8)
    try:
        per_tenant = args.sessions // args.tenants
        per_session = max(1, args.jobs // args.sessions)
        for t in range(args.tenants):
            await _backlog(db, f"tenant-{t}", per_tenant, per_session)
        async with db.owner() as s:
            await s.execute(text("ANALYZE"))
            total = int(await s.scalar(text("SELECT count(*) FROM agent_run_queue")) or 0)
        queue = RunQueue(db)
        order: dict[UUID, list[UUID]] = defaultdict(list)
        finished = 0

        async def finish(run: ClaimedRun, worker: str) -> None:
            nonlocal finished
            async with db.tenant(run.principal) as s:
                done = (
                    await s.execute(
                        query("finish_run"),
                        {
                            "run_id": run.id,
                            "worker_id": worker,
                            "attempt": run.attempt,
                            "status": "completed",
                            "result": '{"text": "ok"}',
                            "error": None,
                        },
                    )
                ).one_or_none()
            assert done is not None, f"lease on {run.id} lost"
            finished += 1

        async def consumer(n: int) -> None:
            worker = f"bench-{n}"
            idle = 0
            while finished < total and idle < 200:
                batch = (await queue.claim_batch(worker, 60, limit=args.batch)).runs
                if not batch:
                    idle += 1
                    await asyncio.sleep(0.001)
                    continue
                idle = 0
                for run in batch:
                    order[run.session_id].append(run.id)
                await asyncio.gather(*(finish(run, worker) for run in batch))

        began = time.perf_counter()
        await asyncio.gather(*(consumer(n) for n in range(args.consumers)))
        wall = time.perf_counter() - began
        async with db.owner() as s:
            rows = (
                await s.execute(
                    text(
                        "SELECT id, session_id, status, attempts FROM agent_run_queue ORDER BY queue_seq"
                    )
                )
            ).all()
        expected: dict[UUID, list[UUID]] = defaultdict(list)
        for row in rows:
            expected[row.session_id].append(row.id)
        problems = [r.id for r in rows if r.status != "completed" or r.attempts != 1]
        out_of_order = [sid for sid, ids in expected.items() if order.get(sid) != ids]
        return {
            "jobs": total,
            "wall": wall,
            "rate": finished / wall,
            "bad": len(problems),
            "out_of_order": len(out_of_order),
        }
    finally:
        await db.dispose()


def _numbered(name: str) -> tuple[str, list[str]]:
    """A named statement of queries.sql with its `:params` as `$n` (asyncpg), and their names."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    return re.sub(r"(?<![:\w]):(\w+)", number, query(name).text), names


async def _throughput_raw(
    url: str, args: argparse.Namespace, *, one_commit: bool = False
) -> dict[str, Any]:
    """(a) again with the same two statements on bare asyncpg (prepared): the claim in one round
    trip as the worker role, the finish in a transaction as the run's tenant (BEGIN, set role and
    claims, finish_run, COMMIT): what the queue's SQL costs without the app's database layer."""
    import asyncpg  # the app's driver

    db = Database(url)
    per_tenant = args.sessions // args.tenants
    for t in range(args.tenants):
        await _backlog(db, f"tenant-{t}", per_tenant, max(1, args.jobs // args.sessions))
    async with db.owner() as s:
        await s.execute(text("ANALYZE"))
        total = int(await s.scalar(text("SELECT count(*) FROM agent_run_queue")) or 0)
    await db.dispose()
    u = make_url(url)
    connect = {
        "user": u.username,
        "password": u.password,
        "database": u.database,
        "host": u.host or u.query.get("host"),
        "port": u.port,
    }
    claims = await asyncpg.create_pool(
        **connect,
        min_size=args.consumers,
        max_size=args.consumers,
        server_settings={"role": "agent_runtime_worker"},
    )
    pool = await asyncpg.create_pool(
        **connect, min_size=args.consumers * args.batch, max_size=args.consumers * args.batch
    )
    claim_sql, claim_names = _numbered("claim_runs")
    finish_sql, finish_names = _numbered("finish_run")
    order: dict[UUID, list[UUID]] = defaultdict(list)
    finished = 0

    async def finish(row: Any, worker: str) -> None:
        async with pool.acquire() as conn, conn.transaction():
            await finish_on(conn, row, worker)

    async def finish_on(conn: Any, row: Any, worker: str) -> None:
        """finish_run of `row` as its tenant, in the transaction open on `conn`."""
        nonlocal finished
        values = {
            "run_id": row["id"],
            "worker_id": worker,
            "attempt": row["attempts"],
            "status": "completed",
            "result": '{"text": "ok"}',
            "error": None,
        }
        who = Principal(user_id=row["user_id"], tenant_id=row["tenant_id"], role="service")
        await conn.execute(SET_TENANT, json.dumps(who.db_claims()))
        done = await conn.fetchrow(finish_sql, *(values[n] for n in finish_names))
        assert done is not None, f"lease on {row['id']} lost"
        finished += 1

    async def consumer(n: int) -> None:
        worker = f"bench-{n}"
        values = {
            "worker_id": worker,
            "lease_seconds": 60.0,
            "limit": args.batch,
            "max_attempts": 5,
        }
        idle = 0
        while finished < total and idle < 200:
            rows = [
                r
                for r in await claims.fetch(claim_sql, *(values[k] for k in claim_names))
                if r["id"] is not None
            ]
            if not rows:
                idle += 1
                await asyncio.sleep(0.001)
                continue
            idle = 0
            for row in rows:
                order[row["session_id"]].append(row["id"])
            if one_commit:  # the batch's finishes in one transaction: one commit per batch
                async with pool.acquire() as conn, conn.transaction():
                    for row in rows:
                        await finish_on(conn, row, worker)
            else:
                await asyncio.gather(*(finish(row, worker) for row in rows))

    try:
        began = time.perf_counter()
        await asyncio.gather(*(consumer(n) for n in range(args.consumers)))
        wall = time.perf_counter() - began
        rows = await pool.fetch(
            "SELECT id, session_id, status, attempts FROM agent_run_queue ORDER BY queue_seq"
        )
    finally:
        await pool.close()
        await claims.close()
    expected: dict[UUID, list[UUID]] = defaultdict(list)
    for row in rows:
        expected[row["session_id"]].append(row["id"])
    return {
        "jobs": total,
        "wall": wall,
        "rate": finished / wall,
        "bad": sum(1 for r in rows if r["status"] != "completed" or r["attempts"] != 1),
        "out_of_order": sum(1 for sid, ids in expected.items() if order.get(sid) != ids),
    }


# ---------------------------------------------------------------- (b) pgqueuer


def _pgq_python(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run(
        [str(python), "-c", "import pgqueuer, asyncpg, uvloop"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "pgqueuer", "asyncpg", "uvloop"],
            check=True,
        )
    return python


def _pgqueuer(server_url: str, args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    python = _pgq_python(Path(args.pgq_venv))
    url = _fresh_database(server_url, "bench_pgqueuer", migrate=False)
    u = make_url(url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(PGDATABASE=u.database or "", PGUSER=u.username or "postgres")
    if host := (u.host or u.query.get("host")):
        env["PGHOST"] = str(host)
    if u.port is not None:
        env["PGPORT"] = str(u.port)
    if u.password:
        env["PGPASSWORD"] = u.password
    script = data_dir / "pgq_drain.py"
    script.write_text(PGQ_SCRIPT)
    done = subprocess.run(
        [str(python), str(script), str(args.jobs), str(args.consumers), str(args.batch)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=data_dir,
    )
    if done.returncode != 0:
        raise SystemExit(f"pgqueuer's drain failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["rate"] = result["jobs"] / result["wall"]
    return result


# ---------------------------------------------------------------- (c) claim cost


def _old_statements(rev: str) -> dict[str, str]:
    source = subprocess.run(
        ["git", "show", f"{rev}:app/queue/queries.sql"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    parts = _HEADER.split(source)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


async def _explain(db: Database, sql: str, params: dict[str, Any], repeat: int) -> float:
    """Median EXPLAIN ANALYZE execution time (ms) of `sql`, each execution rolled back."""
    times = []
    for _ in range(repeat):
        async with db.queue() as s:
            plan = (
                await s.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}"), params)
            ).scalar_one()
            await s.rollback()
        doc = plan if isinstance(plan, list) else json.loads(plan)
        times.append(float(doc[0]["Execution Time"]))
    return statistics.median(times)


async def _variants(db: Database, old: dict[str, str], repeat: int) -> dict[str, float]:
    """EXPLAIN ANALYZE medians of the new claim and of the old pair (fair, then fifo)."""
    params = {"worker_id": "x", "lease_seconds": 30, "limit": 1, "max_attempts": 5}
    out = {"new": await _explain(db, query("claim_runs").text, params, repeat)}
    if old:
        out["old"] = await _explain(db, old["claim_next"], params, repeat) + await _explain(
            db, old["claim_next_fifo"], params, repeat
        )
    return out


async def _timed_claims(db: Database, repeat: int, *, requeue: bool) -> float:
    """Median wall time (ms) of `RunQueue.claim_next`, committed; the claimed run is put back
    (queued again, `requeue`) between claims so every claim sees the same queue."""
    queue = RunQueue(db)
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        claimed = await queue.claim_next("bench", 30)
        times.append((time.perf_counter() - began) * 1000)
        assert (claimed is not None) == requeue, claimed
        if claimed is not None:
            async with db.owner() as s:
                await s.execute(REQUEUE, {"id": claimed.id})
    return statistics.median(times)


async def _cost(server_url: str, args: argparse.Namespace) -> list[tuple[str, dict[str, float]]]:
    old = _old_statements(args.against) if args.against else {}
    rows: list[tuple[str, dict[str, float]]] = []
    for queued in (400, 40_000):
        url = _fresh_database(server_url, f"bench_claim_empty_{queued}")
        db = Database(url)
        try:
            for t in range(10):
                await _backlog(db, f"tenant-{t}", queued // 100, 11)
            async with db.owner() as s:
                await s.execute(BUSY_EVERY_LANE)
                left = await s.scalar(
                    text("SELECT count(*) FROM agent_run_queue WHERE status = 'queued'")
                )
            _vacuum(url)
            result = await _variants(db, old, args.repeat)
            result["wall"] = await _timed_claims(db, args.repeat, requeue=False)
            rows.append((f"empty claim, every lane busy, {left} queued", result))
        finally:
            await db.dispose()
    for history in (3, 1000):
        url = _fresh_database(server_url, f"bench_claim_history_{history}")
        db = Database(url)
        try:
            for t in range(10):  # other tenants' finished history and a backlog beside it
                await _backlog(db, f"other-{t}", 40, 10)
            await _backlog(db, "tenant-h", 1, history, prefix="hist-", status="completed")
            async with db.owner() as s:
                session_id = await s.scalar(
                    text("SELECT id FROM agent_sessions WHERE session_key = 'hist-1'")
                )
                await s.execute(
                    text(
                        "INSERT INTO agent_run_queue (tenant_id, session_id, agent_id, user_id, "
                        "input) SELECT tenant_id, id, agent_id, user_id, '{}' FROM agent_sessions "
                        "WHERE id = :sid"
                    ),
                    {"sid": session_id},
                )
                await s.execute(
                    text(
                        BUSY_EVERY_LANE.text.replace(
                            "WHERE status", "WHERE tenant_id <> 'tenant-h' AND status"
                        )
                    )
                )
            _vacuum(url)
            result = await _variants(db, old, args.repeat)
            result["wall"] = await _timed_claims(db, args.repeat, requeue=True)
            rows.append((f"claim in a session with {history} finished runs", result))
        finally:
            await db.dispose()
    return rows


# ---------------------------------------------------------------- main


async def _main(server_url: str, args: argparse.Namespace, data_dir: Path) -> None:
    ours = await _throughput(_fresh_database(server_url, "bench_claim_throughput"), args)
    print(f"agent-runtime: {ours}", file=sys.stderr)
    raw = await _throughput_raw(_fresh_database(server_url, "bench_claim_raw"), args)
    print(f"agent-runtime, bare asyncpg: {raw}", file=sys.stderr)
    one = await _throughput_raw(
        _fresh_database(server_url, "bench_claim_one_commit"), args, one_commit=True
    )
    print(f"agent-runtime, bare asyncpg, one commit per batch: {one}", file=sys.stderr)
    pgq = _pgqueuer(server_url, args, data_dir)
    print(f"pgqueuer: {pgq}", file=sys.stderr)
    cost = await _cost(server_url, args)
    print(
        f"\n{args.jobs} runs over {args.sessions} sessions of {args.tenants} tenants; "
        f"{args.consumers} consumers, batch {args.batch}\n"
    )
    print("| queue | jobs | wall (s) | jobs/s |")
    print("|---|---|---|---|")
    print(
        f"| agent-runtime claim_batch + finish_run | {ours['jobs']} | {ours['wall']:.2f} | {ours['rate']:.0f} |"
    )
    print(
        f"| agent-runtime claim_runs + finish_run, bare asyncpg | {raw['jobs']} | "
        f"{raw['wall']:.2f} | {raw['rate']:.0f} |"
    )
    print(
        f"| the same, the batch's finishes in one transaction | {one['jobs']} | "
        f"{one['wall']:.2f} | {one['rate']:.0f} |"
    )
    print(f"| pgqueuer no-op drain | {pgq['jobs']} | {pgq['wall']:.2f} | {pgq['rate']:.0f} |")
    print(
        f"\nratio agent-runtime ÷ pgqueuer: {ours['rate'] / pgq['rate']:.2f} (app's Database), "
        f"{raw['rate'] / pgq['rate']:.2f} (bare asyncpg), {one['rate'] / pgq['rate']:.2f} (one "
        "commit per batch)"
    )
    print(
        f"runs not completed after exactly one claim: {ours['bad'] + raw['bad'] + one['bad']}; "
        "sessions claimed out of queue order: "
        f"{ours['out_of_order'] + raw['out_of_order'] + one['out_of_order']}; pgqueuer "
        f"jobs left: {pgq['left']}"
    )
    against = f" (old: {args.against})" if args.against else ""
    print(
        f"\n| claim | wall, claim_next (ms, median) | EXPLAIN new (ms) | EXPLAIN old{against} (ms) |"
    )
    print("|---|---|---|---|")
    for label, r in cost:
        old = f"{r['old']:.2f}" if "old" in r else "-"
        print(f"| {label} | {r['wall']:.2f} | {r['new']:.3f} | {old} |")
    by = dict(cost)
    keys = list(by)
    for big, small in ((keys[1], keys[0]), (keys[3], keys[2])):
        print(
            f"\n{big} ÷ {small}: wall {by[big]['wall'] / by[small]['wall']:.2f}, "
            f"EXPLAIN new {by[big]['new'] / by[small]['new']:.2f}"
            + (f", EXPLAIN old {by[big]['old'] / by[small]['old']:.2f}" if "old" in by[big] else "")
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=2_000)
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--consumers", type=int, default=5, help="pgqueuer's default: 5")
    parser.add_argument("--batch", type=int, default=10, help="pgqueuer's default: 10")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--against", default="9acb540", help="git revision of the old claim")
    parser.add_argument("--pgq-venv", default="/tmp/pgq-venv")
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="artc-", dir="/tmp"))
    work_dir = Path(tempfile.mkdtemp(prefix="artc-w-", dir="/tmp"))
    pg = None
    server_url = os.environ.get("DATABASE_URL")
    try:
        if not server_url:
            pg = EmbeddedPostgres(data_dir)
            server_url = pg.start()
        asyncio.run(_main(server_url, args, work_dir))
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
