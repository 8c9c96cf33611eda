"""Whole flows through real processes: HTTP API, worker processes, the offline model, Postgres."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.e2e.conftest import Stack

# Leases and kill -9 against deadlines: never beside another test (`make test` runs these after
# the parallel part).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]


def types(events: list[dict[str, object]]) -> list[object]:
    return [e["type"] for e in events]


def test_message_streams_to_completion(stack: Stack) -> None:
    run = stack.post("hello from the e2e test")
    events = stack.stream(run["runId"])
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert types(events)[:2] == ["run.queued", "run.started"]
    assert types(events)[-1] == "run.completed"
    assert types(events).count("assistant.delta") >= 2
    assert "hello from the e2e test" in str(events[-1]["result"])
    status = stack.status(run["runId"])
    assert status["status"] == "completed"
    assert status["usage"]["inputTokens"] > 0 and status["usage"]["outputTokens"] > 0


def test_tools_persist_workspace_across_runs(stack: Stack) -> None:
    first = stack.post('/tool write_file {"path": "notes/a.txt", "content": "remember me"}')
    assert stack.wait_status(first["runId"], {"completed", "failed"})["status"] == "completed"
    second = stack.post(
        '/tool read_file {"path": "notes/a.txt"}\n/tool read_file {"path": "../etc/passwd"}',
        sessionKey=first["sessionKey"],
    )
    events = stack.stream(second["runId"])
    completed = [e for e in events if e["type"] == "tool.completed"]
    failed = [e for e in events if e["type"] == "tool.failed"]
    assert "remember me" in json.dumps(completed[0]["result"])
    assert failed and failed[0]["name"] == "read_file"
    assert types(events)[-1] == "run.completed"


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


def test_sse_resume_has_no_gap_or_duplicate(stack: Stack) -> None:
    run = stack.post("resume me " + "x" * 200)
    full = stack.stream(run["runId"])
    tail = stack.stream(run["runId"], last_event_id=3)
    assert [e["seq"] for e in tail] == [e["seq"] for e in full if e["seq"] > 3]
    assert tail == [e for e in full if e["seq"] > 3]


def test_sigterm_worker_exits_cleanly(stack: Stack) -> None:
    proc = stack.workers["w1"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    run = stack.post("still served by w2")
    assert stack.wait_status(run["runId"], {"completed"})["status"] == "completed"


def test_tenants_are_isolated_end_to_end(stack: Stack) -> None:
    run = stack.post("alice's secret", sessionKey="same-key")
    other = stack.post("bob's", user="bob", sessionKey="same-key")
    stack.wait_status(run["runId"], {"completed"})
    for path, params in [
        ("/api/agent-runtime/status", {"runId": run["runId"]}),
        ("/api/agent-runtime/stream", {"runId": run["runId"]}),
    ]:
        r = httpx.get(stack.base_url + path, params=params, headers=stack.headers("bob"), timeout=5)
        assert r.status_code == 404
    bob_msgs = httpx.get(
        f"{stack.base_url}/api/agent-runtime/sessions/same-key/messages",
        headers=stack.headers("bob"),
        timeout=5,
    ).json()["messages"]
    assert "alice's secret" not in json.dumps(bob_msgs)
    assert stack.wait_status(other["runId"], {"completed"}, user="bob")


def test_cli_run_streams_to_terminal(stack: Stack) -> None:
    env = {**stack.env}
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", "hi from the cli", "--url", stack.base_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "hi from the cli" in out.stdout
    assert os.linesep in out.stdout
