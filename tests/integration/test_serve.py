"""`resolve_database`, `agent-runtime migrate` and `agent-runtime serve` on real Postgres servers."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest

from app.config import Settings
from app.db.migrate import head_revision
from app.serve import current_revision, migrate, resolve_database

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A short data dir (the embedded server's socket lives in it)."""
    path = Path(tempfile.mkdtemp(prefix="ars-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_embedded_database_is_started_attached_and_survives_restarts(data_dir: Path) -> None:
    settings = Settings(database_url=None, agent_runtime_data_dir=data_dir)
    url, pg = resolve_database(settings)
    assert pg is not None
    postmaster = data_dir / "pg" / "postmaster.pid"
    try:
        assert current_revision(url) is None
        assert migrate(url) == head_revision()
        with psycopg.connect(url) as conn:
            conn.execute("CREATE TABLE survives (x int)")

        # Another process (the CLI) attaches to the running server instead of starting one, and
        # leaves it running for us when it exits.
        env = {**os.environ, "AGENT_RUNTIME_DATA_DIR": str(data_dir)}
        env.pop("DATABASE_URL", None)
        out = cli("migrate", env=env)
        assert out.returncode == 0, out.stderr
        assert f"at revision {head_revision()} (head)" in out.stdout
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pg.stop()
    assert not postmaster.exists(), "the last user stopped the server"

    # A process that died without cleaning up must not keep the next server alive forever.
    (data_dir / "pg" / ".handle_pids.json").write_text(json.dumps([dead_pid()]))
    url2, pg2 = resolve_database(settings)
    assert pg2 is not None
    try:
        assert current_revision(url2) == head_revision()
        with psycopg.connect(url2) as conn:
            assert conn.execute("SELECT to_regclass('survives')::text").fetchone() == ("survives",)
    finally:
        pg2.stop()
    assert not postmaster.exists()


def test_embedded_data_dir_path_too_long_is_refused(tmp_path: Path) -> None:
    settings = Settings(database_url=None, agent_runtime_data_dir=Path("/tmp") / ("x" * 120))
    with pytest.raises(RuntimeError, match="too long"):
        resolve_database(settings)


def test_migrate_cli_against_database_url(db_url: str) -> None:
    env = {**os.environ, "DATABASE_URL": db_url, "LOG_JSON": "true"}
    out = cli("migrate", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith(f"at revision {head_revision()} (head)")
    assert current_revision(db_url) == head_revision()


def test_services_refuse_an_unmigrated_database(server_url: str) -> None:
    env = {**os.environ, "DATABASE_URL": server_url}  # the maintenance db: never migrated
    for command in ("worker", "api"):
        out = cli(command, env=env)
        assert out.returncode == 2, out.stderr
        assert "run `agent-runtime migrate` first" in out.stderr


def test_migrate_cli_reports_an_unreachable_database(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": f"postgresql://nobody:pw@/nothing?host={tmp_path}",
    }
    out = cli("migrate", env=env)
    assert out.returncode == 2
    assert out.stderr.startswith("error: cannot migrate postgresql://nobody:***@")
    assert "pw@" not in out.stdout + out.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Serving:
    """A `serve` process in its own session (process group), started by `serving()`."""

    def __init__(
        self, proc: subprocess.Popen[bytes], env: dict[str, str], port: int, out: Path, err: Path
    ) -> None:
        self.proc = proc
        self.env = env
        self.port = port
        self.out = out
        self.err = err

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def token(self) -> str:
        found = re.search(r"export TOKEN=(\S+)", self.out.read_text())
        assert found is not None, self.out.read_text()
        return found.group(1)

    def children(self) -> dict[int, str]:
        ps = subprocess.run(
            ["ps", "-o", "pid=,args=", "--ppid", str(self.proc.pid)],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        return {int(pid): args for pid, args in (line.split(None, 1) for line in ps.splitlines())}

    def stderr_tail(self) -> str:
        return self.err.read_text()[-3000:]


@contextmanager
def serving(db_url: str, tmp_path: Path, **extra_env: str) -> Iterator[Serving]:
    """Start `agent-runtime serve` and wait for its banner; kill what is left on the way out."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "AGENT_RUNTIME_DATA_DIR": str(tmp_path / "data"),
        "PORT": str(port),
        "WORKERS": "2",
        "SHUTDOWN_GRACE_SECONDS": "2",
        **extra_env,
    }
    env.pop("SUPABASE_JWT_SECRET", None)
    out_path, err_path = tmp_path / "serve.out", tmp_path / "serve.err"
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve"],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=err,
            start_new_session=True,  # its own process group, so we can "press Ctrl-C"
        )
    serve = Serving(proc, env, port, out_path, err_path)
    try:
        deadline = time.monotonic() + 60
        while "Ctrl-C stops everything" not in out_path.read_text():
            assert proc.poll() is None, serve.stderr_tail()
            assert time.monotonic() < deadline, serve.stderr_tail()
            time.sleep(0.1)
        assert serve.url in out_path.read_text()
        yield serve
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def assert_nothing_left(serve: Serving) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", serve.port))  # the port is free again
    leftover = subprocess.run(
        ["pgrep", "-s", str(serve.proc.pid)], capture_output=True, text=True, check=False
    )
    assert leftover.stdout == "", "no process of the session survives"


@pytest.mark.e2e
def test_serve_runs_everything_and_ctrl_c_stops_it(db_url: str, tmp_path: Path) -> None:
    """`serve` prints a working dev token, serves runs, and Ctrl-C leaves nothing behind."""
    with serving(db_url, tmp_path) as serve:
        r = httpx.post(
            f"{serve.url}/api/agent-runtime",
            json={"message": "hello from serve"},
            headers={"Authorization": f"Bearer {serve.token()}"},
            timeout=10,
        )
        assert r.status_code == 202, r.text
        workers = list(serve.children().values())
        assert sum("app.cli worker" in w for w in workers) == 2
        assert sum("app.cli api" in w for w in workers) == 1

        run = cli("run", "hi from run", "--url", serve.url, env=serve.env)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "You said: hi from run" in run.stdout

        os.killpg(serve.proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        assert serve.proc.wait(30) == 0, serve.stderr_tail()
    assert_nothing_left(serve)


@pytest.mark.e2e
def test_serve_stops_everything_on_sigterm(db_url: str, tmp_path: Path) -> None:
    """SIGTERM to `serve` alone (as systemd, Docker or Kubernetes send it): it stops its children,
    whose worker hands the run in progress back to the queue, frees the port and exits 0."""
    with serving(db_url, tmp_path) as serve:
        r = httpx.post(
            f"{serve.url}/api/agent-runtime",
            json={"message": "/sleep 60000"},
            headers={"Authorization": f"Bearer {serve.token()}"},
            timeout=10,
        )
        assert r.status_code == 202, r.text
        run_id = r.json()["runId"]
        with psycopg.connect(db_url, autocommit=True) as conn:
            deadline = time.monotonic() + 20
            while run_status(conn, run_id) != "running":
                assert time.monotonic() < deadline, serve.stderr_tail()
                time.sleep(0.1)
        children = serve.children()
        assert len(children) == 3, children  # the API and two workers

        serve.proc.send_signal(signal.SIGTERM)  # to serve only, not to its process group
        assert serve.proc.wait(30) == 0, serve.stderr_tail()
    for pid in children:
        assert not Path(f"/proc/{pid}").exists() or "(Z)" in Path(f"/proc/{pid}/stat").read_text()
    assert_nothing_left(serve)
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert run_status(conn, run_id) == "queued"  # handed back by its stopping worker
        types = conn.execute(
            "SELECT type FROM run_events WHERE run_id = %s ORDER BY seq", (run_id,)
        ).fetchall()
    assert [t for (t,) in types][-1] == "run.requeued"


def run_status(conn: psycopg.Connection, run_id: str) -> str | None:
    row = conn.execute("SELECT status FROM agent_run_queue WHERE id = %s", (run_id,)).fetchone()
    return None if row is None else str(row[0])
