"""Whole flows through real processes that kill, stop or time them: a worker killed mid-run, a
cancel against a deadline, SIGTERM. The flows that only need the processes running are in
test_flows_shared.py (one stack per module, in the parallel part)."""

from __future__ import annotations

import signal
import time

import httpx
import pytest

from tests.e2e.conftest import Stack

# Leases and kill -9 against deadlines: never beside another test (`make test` runs these after
# the parallel part).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]


def types(events: list[dict[str, object]]) -> list[object]:
    return [e["type"] for e in events]


def test_kill_9_worker_mid_run_is_taken_over(stack: Stack) -> None:
    """A worker dies (SIGKILL) after a tool ran; another finishes the run without re-running it."""
    run = stack.post(
        '/tool write_file {"path": "once.txt", "content": "x"}\n/sleep 4000', sessionKey="crash"
    )
    # wait until the tool result is stored and the model is sleeping
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        r = httpx.get(
            f"{stack.base_url}/api/agent-runtime/sessions/crash/messages",
            headers=stack.headers(),
            timeout=5,
        )
        if r.status_code == 200 and any(m["role"] == "tool" for m in r.json()["messages"]):
            break
        time.sleep(0.05)
    holder = _holder(stack, run["runId"])
    stack.workers[holder].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    final = stack.wait_status(run["runId"], {"completed", "failed"}, timeout=30)
    assert final["status"] == "completed", final
    assert time.monotonic() - killed_at < 2 + 4 + 6  # lease + remaining sleep + slack
    assert final["attempts"] == 2
    events = stack.stream(run["runId"])
    assert types(events).count("tool.started") == 1, "a stored tool call ran twice"
    assert "run.resumed" in types(events)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


def _holder(stack: Stack, run_id: str) -> str:
    """Which of the test's workers holds the run (from the run.started event's workerId)."""
    events = httpx.get(
        f"{stack.base_url}/api/agent-runtime/runs/{run_id}/events",
        headers=stack.headers(),
        timeout=5,
    ).json()["events"]
    worker_id = next(e["workerId"] for e in events if e["type"] == "run.started")
    pid = int(worker_id.split(":")[1])
    return next(name for name, p in stack.workers.items() if p.pid == pid)


def test_cancel_running_run(stack: Stack) -> None:
    run = stack.post("/sleep 20000\nplease wait")
    stack.wait_status(run["runId"], {"running"})
    r = httpx.post(
        f"{stack.base_url}/api/agent-runtime/cancel",
        params={"runId": run["runId"]},
        headers=stack.headers(),
        timeout=5,
    )
    assert r.status_code == 200, r.text
    asked = time.monotonic()
    stack.wait_status(run["runId"], {"cancelled"}, timeout=3)
    assert time.monotonic() - asked < 2.5
    after = stack.post("next in lane", sessionKey=run["sessionKey"])
    assert stack.wait_status(after["runId"], {"completed"})["status"] == "completed"


def test_sigterm_worker_exits_cleanly(stack: Stack) -> None:
    proc = stack.workers["w1"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    run = stack.post("still served by w2")
    assert stack.wait_status(run["runId"], {"completed"})["status"] == "completed"
