"""Whole flows through real processes: HTTP API, worker processes, the offline model, Postgres.

One API + two workers serve the module (each test is a user and tenant of its own); the flows
that kill or stop processes are in test_flows.py, after the parallel part.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from tests.e2e.conftest import Stack, stack_per_user

pytestmark = pytest.mark.e2e

stack = pytest.fixture(stack_per_user)


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


def test_sse_resume_has_no_gap_or_duplicate(stack: Stack) -> None:
    run = stack.post("resume me " + "x" * 200)
    full = stack.stream(run["runId"])
    tail = stack.stream(run["runId"], last_event_id=3)
    assert [e["seq"] for e in tail] == [e["seq"] for e in full if e["seq"] > 3]
    assert tail == [e for e in full if e["seq"] > 3]


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
