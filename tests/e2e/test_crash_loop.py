"""A run that kills its worker every time: real worker processes, each `kill -9`ed as soon as it
claims the run (as a tool that runs the process out of memory would), MAX_RUN_ATTEMPTS=2. The
run must end `failed` with `worker_crashed` instead of holding its session's lane forever."""

from __future__ import annotations

import signal
import time
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Stack

# Leases and kill -9 against deadlines: never beside another test (`make test` runs these after
# the parallel part).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]


@pytest.fixture
def stack_env() -> dict[str, str]:
    return {"MAX_RUN_ATTEMPTS": "2"}


def _events(stack: Stack, run_id: str) -> list[dict[str, Any]]:
    r = httpx.get(
        f"{stack.base_url}/api/agent-runtime/runs/{run_id}/events",
        params={"limit": 1000},
        headers=stack.headers(),
        timeout=5,
    )
    assert r.status_code == 200, r.text
    return list(r.json()["events"])


def _wait_claimed(stack: Stack, run_id: str, attempt: int, timeout: float = 20) -> str:
    """The name of the worker process that started `attempt` of the run (once it has)."""
    deadline = time.monotonic() + timeout
    while True:
        starts = [
            e
            for e in _events(stack, run_id)
            if e["type"] in ("run.started", "run.resumed") and e["attempt"] == attempt
        ]
        if starts:
            pid = int(starts[0]["workerId"].split(":")[1])
            return next(name for name, p in stack.workers.items() if p.pid == pid)
        if time.monotonic() > deadline:
            raise AssertionError(f"attempt {attempt} never started\n{stack.logs()}")
        time.sleep(0.05)


def test_a_run_that_kills_its_worker_every_time_fails_and_the_session_goes_on(
    stack: Stack,
) -> None:
    run = stack.post("/sleep 5000\nI take my worker down with me", sessionKey="oom")
    behind = stack.post("and then this", sessionKey="oom")

    for attempt in (1, 2):
        holder = _wait_claimed(stack, run["runId"], attempt)
        stack.workers[holder].send_signal(signal.SIGKILL)
        stack.workers[holder].wait(5)
        stack.start_worker(f"after-{attempt}")  # keep two workers alive

    final = stack.wait_status(run["runId"], {"completed", "failed", "cancelled"}, timeout=30)
    assert final["status"] == "failed", final
    assert final["attempts"] == 2
    assert final["error"] == {
        "code": "worker_crashed",
        "message": "the run's worker stopped 2 times (MAX_RUN_ATTEMPTS=2); giving up",
    }
    assert final["finishedAt"] is not None
    events = stack.stream(run["runId"])  # ends: run.failed is terminal
    runs = [e["type"] for e in events if e["type"] != "state.changed"]
    assert runs == ["run.queued", "run.started", "run.resumed", "run.failed"]
    assert events[-1]["error"] == final["error"]

    done = stack.wait_status(behind["runId"], {"completed", "failed"}, timeout=20)
    assert done["status"] == "completed", done
    assert done["attempts"] == 1
    assert "and then this" in str(done["result"])
