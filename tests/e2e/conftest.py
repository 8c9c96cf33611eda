"""End-to-end fixtures: the real API and worker processes (`agent-runtime api|worker`) on a fresh DB."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.auth.jwt import mint_token

SECRET = "e2e-secret-0123456789abcdef0123456789abcdef"
SECRETS_KEY = "e2e:" + base64.b64encode(b"k" * 32).decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Stack:
    """A running API process and worker processes over one database."""

    base_url: str
    env: dict[str, str]
    log_dir: Path
    api: subprocess.Popen[bytes] | None = None
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    user: str = "alice"
    """The user (and so, by default, the tenant) of calls that name none."""

    def token(
        self, user: str | None = None, tenant: str | None = None, role: str | None = None
    ) -> str:
        """A token of `user` (default: the stack's) in `tenant` (default: their own, which they
        own); `role` as `app_metadata.role` (a shared tenant's default is member)."""
        return mint_token(SECRET, user_id=user or self.user, tenant_id=tenant, role=role)

    def headers(self, user: str | None = None, tenant: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(user, tenant)}"}

    def restart_api(self) -> None:
        """Stop the API process (SIGTERM) and start a new one on the same port; wait until ready."""
        assert self.api is not None
        self.api.send_signal(signal.SIGTERM)
        try:
            self.api.wait(15)
        except subprocess.TimeoutExpired:
            self.api.kill()
            self.api.wait()
        self.api = _spawn(["api"], self.env, self.log_dir / "api.log")
        _wait_ready(self)

    def start_worker(self, name: str, **env: str) -> subprocess.Popen[bytes]:
        proc = _spawn(["worker"], {**self.env, **env}, self.log_dir / f"{name}.log")
        self.workers[name] = proc
        return proc

    def post(self, message: str, user: str | None = None, **body: Any) -> dict[str, Any]:
        r = httpx.post(
            f"{self.base_url}/api/agent-runtime",
            json={"message": message, **body},
            headers=self.headers(user),
            timeout=10,
        )
        assert r.status_code == 202, r.text
        return dict(r.json())

    def status(self, run_id: str, user: str | None = None) -> dict[str, Any]:
        r = httpx.get(
            f"{self.base_url}/api/agent-runtime/status",
            params={"runId": run_id},
            headers=self.headers(user),
            timeout=10,
        )
        assert r.status_code == 200, r.text
        return dict(r.json())

    def wait_status(
        self, run_id: str, statuses: set[str], timeout: float = 20, user: str | None = None
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            st = self.status(run_id, user)
            if st["status"] in statuses:
                return st
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} stuck in {st['status']}: {st}")
            time.sleep(0.05)

    def stream(
        self,
        run_id: str,
        user: str | None = None,
        last_event_id: int | None = None,
        timeout: float = 30,
    ) -> list[dict[str, Any]]:
        """Read the SSE stream to its end; returns the events' data with their `id`s checked."""
        headers = self.headers(user)
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        events: list[dict[str, Any]] = []
        with httpx.stream(
            "GET",
            f"{self.base_url}/api/agent-runtime/stream",
            params={"runId": run_id},
            headers=headers,
            timeout=timeout,
        ) as r:
            assert r.status_code == 200
            current: dict[str, str] = {}
            for line in r.iter_lines():
                if line == "":
                    if "data" in current:
                        data = json.loads(current["data"])
                        assert int(current["id"]) == data["seq"]
                        assert current["event"] == data["type"]
                        events.append(data)
                    current = {}
                elif not line.startswith(":"):
                    key, _, value = line.partition(":")
                    current[key] = value[1:] if value.startswith(" ") else value
        return events

    def stop(self) -> None:
        procs = [p for p in [self.api, *self.workers.values()] if p is not None]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text()[-3000:]}" for p in self.log_dir.glob("*.log")
        )


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    out = log.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", *args], env=env, stdout=out, stderr=subprocess.STDOUT
    )


@pytest.fixture
def stack_env() -> dict[str, str]:
    """Extra environment of the stack's processes (override in a test module to add settings)."""
    return {}


def _wait_ready(st: Stack) -> None:
    assert st.api is not None
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(f"{st.base_url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or st.api.poll() is not None:
            st.stop()
            raise AssertionError(f"API did not become ready\n{st.logs()}")
        time.sleep(0.1)


@pytest.fixture
def stack_workers() -> tuple[str, ...]:
    """The workers the stack starts with (override in a test module: e.g. none, to start each
    worker in the test with its own environment)."""
    return ("w1", "w2")


@pytest.fixture
def stack(
    db_url: str, tmp_path: Path, stack_env: dict[str, str], stack_workers: tuple[str, ...]
) -> Iterator[Stack]:
    """API + two workers, short leases so takeover is quick."""
    yield from _run_stack(db_url, tmp_path, stack_env, stack_workers)


@pytest.fixture(scope="module")
def shared_stack(module_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One API + two workers for all the tests of a module (starting them is most of a short
    browser test's time). A module opts in by defining `stack` as `stack_per_user` does."""
    yield from _run_stack(module_db_url, tmp_path_factory.mktemp("stack"), {}, ("w1", "w2"))


def stack_per_user(shared_stack: Stack) -> Stack:
    """The module's shared stack, seen as a user of its own: each test is its own user and so
    its own tenant (sessions, memory, policies, approvals), as if it had the stack to itself.
    Use in a module as `stack = pytest.fixture(stack_per_user)`."""
    return replace(shared_stack, user=f"u-{uuid.uuid4().hex[:10]}")


def _run_stack(
    db_url: str, tmp_path: Path, stack_env: dict[str, str], stack_workers: tuple[str, ...]
) -> Iterator[Stack]:
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "SUPABASE_JWT_SECRET": SECRET,
        # a deployment as documented: tenants may store their own provider keys
        "SECRETS_KEY": SECRETS_KEY,
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "LEASE_SECONDS": "2",
        "HEARTBEAT_SECONDS": "0.5",
        "POLL_SECONDS": "5",
        "SHUTDOWN_GRACE_SECONDS": "1",
        "SSE_KEEPALIVE_SECONDS": "2",
        "AGENT_RUNTIME_DATA_DIR": str(tmp_path / "data"),
        "LOG_LEVEL": "INFO",
        **stack_env,
    }
    st = Stack(base_url=f"http://127.0.0.1:{port}", env=env, log_dir=tmp_path)
    st.api = _spawn(["api"], env, tmp_path / "api.log")
    for name in stack_workers:
        st.start_worker(name)
    _wait_ready(st)
    time.sleep(0.5)  # workers' LISTEN connections up
    try:
        yield st
    finally:
        st.stop()
