"""API latency benchmark: `POST /api/agent-runtime` on an existing session, one at a time, idle.

A fresh embedded Postgres (or DATABASE_URL's server), the API as a subprocess (`python -m app.cli
api`), no worker: every post just queues a run. One HTTP/1.1 keep-alive client posts
sequentially; a block of posts goes to one session (created by an untimed first post), the next
block to a fresh session, so no session's lane grows long. Prints p50/p95/p99 in ms and the API
process's CPU time per timed post (from `/proc`, so Linux only).

`--ab REV` also starts the API of git revision REV (from a detached worktree in /tmp, its own
database migrated by its own code, the same venv) and measures both alternately, block by
block, in the same sitting: the table shows both and their ratio.

    .venv/bin/python bench/api/post.py --posts 300 --warmup 50
    .venv/bin/python bench/api/post.py --ab 9acb540

`--statements N` (embedded server only) logs every statement of N more posts per API (after the
timed ones; `bench/queue/statement_log.py`) and prints per post: statements sent, transactions,
BEGINs; `--dump-statements PATH` writes the log lines.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.common import connect, free_port, pct  # noqa: E402

sys.path.insert(0, str(ROOT / "bench" / "queue"))

import statement_log  # noqa: E402

from app.auth.jwt import mint_token  # noqa: E402
from app.db.embedded import EmbeddedPostgres  # noqa: E402

SECRET = "bench-secret-0123456789abcdef0123456789abcdef"


@dataclass
class Target:
    """One API under test: its code directory, process and samples (seconds)."""

    name: str
    code: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    samples: list[float] = field(default_factory=list)
    blocks: int = 0
    cpu: float = 0.0
    """CPU seconds the API process spent in the timed blocks."""

    @property
    def base(self) -> str:
        """The API's base URL."""
        return f"http://127.0.0.1:{self.port}"


def _env(target: Target, url: str, data_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(target.code),
        "DATABASE_URL": url,
        "SUPABASE_JWT_SECRET": SECRET,
        "PORT": str(target.port),
        "LOG_LEVEL": "WARNING",
        "AGENT_RUNTIME_DATA_DIR": str(data_dir),
    }


def _start(target: Target, server_url: str, data_dir: Path, profile: Path | None) -> None:
    """Create and migrate the target's database with its own code, then start its API."""
    db = f"bench_post_{target.name}"
    with connect(server_url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {db}")
    url = make_url(server_url).set(database=db).render_as_string(hide_password=False)
    target.port = free_port()
    env = _env(target, url, data_dir)
    migrate = "import sys; from app.db.migrate import upgrade_to_head; upgrade_to_head(sys.argv[1])"
    subprocess.run([sys.executable, "-c", migrate, url], env=env, cwd=target.code, check=True)
    log = (data_dir / f"api-{target.name}.log").open("ab")
    if profile is None:
        cmd = [sys.executable, "-m", "app.cli", "api"]
    else:
        cmd = [sys.executable, str(Path(__file__).with_name("profile_api.py")), str(profile)]
    target.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, cwd=target.code)


def _wait_ready(target: Target, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert target.proc is not None
        if target.proc.poll() is not None:
            raise SystemExit(f"the API {target.name} exited (code {target.proc.returncode})")
        try:
            if httpx.get(f"{target.base}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"the API {target.name} was not ready after {timeout:.0f} s")
        time.sleep(0.1)


def _block(client: httpx.Client, target: Target, size: int, record: bool) -> None:
    """One untimed post that creates a session, then `size` timed posts to it."""
    key = f"bench-{target.name}-{target.blocks}"
    target.blocks += 1
    r = client.post(f"{target.base}/api/agent-runtime", json={"message": "hi", "sessionKey": key})
    r.raise_for_status()
    cpu = _cpu_seconds(target)
    for i in range(size):
        t = time.perf_counter()
        r = client.post(
            f"{target.base}/api/agent-runtime", json={"message": f"post {i}", "sessionKey": key}
        )
        elapsed = time.perf_counter() - t
        if r.status_code != 202:
            raise SystemExit(f"{target.name}: {r.status_code} {r.text}")
        if record:
            target.samples.append(elapsed)
    if record:
        target.cpu += _cpu_seconds(target) - cpu


def _cpu_seconds(target: Target) -> float:
    """User + system CPU time of the target's API process so far (Linux `/proc`)."""
    assert target.proc is not None
    fields = Path(f"/proc/{target.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _logged(
    client: httpx.Client, target: Target, server_url: str, log: Path, args: argparse.Namespace
) -> statement_log.Tally:
    """`args.statements` posts to an existing session with every statement logged."""
    key = f"bench-{target.name}-logged"
    client.post(f"{target.base}/api/agent-runtime", json={"message": "hi", "sessionKey": key})
    with connect(server_url) as admin, statement_log.capture(admin, log) as lines:
        for i in range(args.statements):
            r = client.post(
                f"{target.base}/api/agent-runtime", json={"message": f"log {i}", "sessionKey": key}
            )
            r.raise_for_status()
    if args.dump_statements:
        path = args.dump_statements.with_suffix(f".{target.name}.log")
        path.write_text("\n".join(lines))
    return statement_log.tally(lines, f"bench_post_{target.name}")


def _stop(targets: list[Target]) -> None:
    for t in targets:
        if t.proc is not None and t.proc.poll() is None:
            t.proc.send_signal(signal.SIGTERM)
    for t in targets:
        if t.proc is not None:
            try:
                t.proc.wait(20)
            except subprocess.TimeoutExpired:
                t.proc.kill()


def _worktree(rev: str) -> Path:
    sha = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    path = Path(f"/tmp/post-{sha}")
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), rev], cwd=ROOT, check=True)
    return path


def _row(label: str, t: Target) -> str:
    ms = [v * 1000 for v in t.samples]
    cpu = t.cpu / len(ms) * 1000
    return (
        f"| {label} | {pct(ms, 50):.2f} | {pct(ms, 95):.2f} | {pct(ms, 99):.2f} | {cpu:.2f} "
        f"| {len(ms)} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--posts", type=int, default=300, help="timed posts per API")
    parser.add_argument("--warmup", type=int, default=50, help="untimed posts per API first")
    parser.add_argument("--block", type=int, default=50, help="posts per session")
    parser.add_argument("--ab", metavar="REV", help="also measure the API of this git revision")
    parser.add_argument("--statements", type=int, default=0, help="posts to log per API")
    parser.add_argument("--dump-statements", type=Path, help="write the statement log here")
    parser.add_argument(
        "--profile", type=Path, help="run the API under cProfile (CPU time), write stats here"
    )
    args = parser.parse_args()

    targets = [Target("head", ROOT)]
    if args.ab:
        targets.append(Target("base", _worktree(args.ab)))
    data_dir = Path(tempfile.mkdtemp(prefix="artp-", dir="/tmp"))
    pg = None
    logs: dict[str, statement_log.Tally] = {}
    server_url = os.environ.get("DATABASE_URL")
    try:
        if not server_url:
            pg = EmbeddedPostgres(data_dir / "pg")
            server_url = pg.start()
        for t in targets:
            _start(t, server_url, data_dir, args.profile if t.name == "head" else None)
        for t in targets:
            _wait_ready(t)
        token = mint_token(SECRET, user_id="bench")
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(headers=headers, timeout=30) as client:
            for t in targets:
                done = 0
                while done < args.warmup:
                    _block(client, t, min(args.block, args.warmup - done), record=False)
                    done += args.block
            if args.profile is not None:
                assert targets[0].proc is not None
                targets[0].proc.send_signal(signal.SIGUSR1)  # profile the timed posts only
                time.sleep(0.2)
            done = 0
            while done < args.posts:
                size = min(args.block, args.posts - done)
                for t in targets:
                    _block(client, t, size, record=True)
                done += size
            if args.statements and pg is not None:
                for t in targets:
                    logs[t.name] = _logged(client, t, server_url, pg.pgdata / "log", args)
    finally:
        _stop(targets)
        if pg is not None:
            pg.stop()
        shutil.rmtree(data_dir, ignore_errors=True)

    print(f"\nposts={args.posts} per API (warm-up {args.warmup}, {args.block} per session)\n")
    print("| API | p50 (ms) | p95 (ms) | p99 (ms) | API CPU/post (ms) | posts |")
    print("|---|---|---|---|---|---|")
    print(_row("this tree", targets[0]))
    if len(targets) > 1:
        print(_row(f"{args.ab}", targets[1]))
        head, base = (sorted(t.samples)[len(t.samples) // 2] for t in targets)
        print(f"\np50 ratio this tree ÷ {args.ab}: {head / base:.2f}")
    if logs:
        print("\n| API | statements/post | transactions/post | BEGINs/post |")
        print("|---|---|---|---|")
        for t in targets:
            n = args.statements
            lt = logs[t.name]
            label = "this tree" if t.name == "head" else str(args.ab)
            print(
                f"| {label} | {lt.statements / n:.1f} | {lt.transactions / n:.1f} "
                f"| {lt.begins / n:.1f} |"
            )


if __name__ == "__main__":
    main()
