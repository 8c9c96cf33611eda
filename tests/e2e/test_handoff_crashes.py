"""Crash tests of the hand-offs (docs/multi-agent.md): a worker dies by SIGKILL at a failpoint
(`AGENT_RUNTIME_FAILPOINTS`) before, during or after a hand-off; a fresh worker finishes the work;
then nothing is lost and nothing is done twice:

* one child run per `sessions_spawn` call, and it ends;
* the child's outcome reaches the parent's conversation exactly once (a `sessions_wait` result
  or an injected message), and `subagent.completed` is stored once;
* every tool call in every transcript has exactly one result;
* every run is finished and every event log is 1..n without gaps.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from app.core.failpoints import (
    CHILD_FINISH_AFTER_COMMIT,
    CHILD_FINISH_BEFORE_COMMIT,
    ENV,
    INJECT_AFTER_COMMIT,
    INJECT_BEFORE_COMMIT,
    TOOL_AFTER_RUN,
)
from tests.conftest import _admin_conn
from tests.e2e.conftest import Stack

# Leases and kill -9 against deadlines: never beside another test (`make test` runs these after
# the parallel part).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

SPAWN = '/tool sessions_spawn {"task": "/answer forty-two", "label": "counter"}'
WAIT_FOR_CHILD = f"{SPAWN}\n/tool sessions_wait {{}}"
"""Spawn, then wait: the outcome comes back as the wait's result."""
INJECT_CHILD = f"{SPAWN}\n/next\n/sleep 1500\n/tool sessions_list {{}}"
"""Spawn, then (next turn, after the child has ended) another tool call: the outcome is injected
before the following model call."""


@pytest.fixture
def stack_workers() -> tuple[str, ...]:
    return ()  # each test starts its own: first the one that will crash


@pytest.fixture
def db(db_url: str) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    conn = _admin_conn(db_url)
    conn.row_factory = dict_row  # type: ignore[assignment]
    try:
        yield conn  # type: ignore[misc]
    finally:
        conn.close()


def _crash_then_recover(stack: Stack, failpoint: str, message: str) -> dict[str, Any]:
    crashy = stack.start_worker("crashy", **{ENV: failpoint})
    time.sleep(0.5)  # its LISTEN connection is up
    run = stack.post(message, sessionKey="parent")
    try:
        crashy.wait(30)
    except Exception as exc:  # pragma: no cover - the failpoint was never reached
        raise AssertionError(f"{failpoint} not reached\n{stack.logs()}") from exc
    assert crashy.returncode == -9, stack.logs()
    stack.start_worker("healthy")
    return run


def _settled(db: psycopg.Connection[dict[str, Any]], timeout: float = 40) -> list[dict[str, Any]]:
    """Wait until every run has ended; return them all."""
    deadline = time.monotonic() + timeout
    while True:
        runs = db.execute("SELECT * FROM agent_run_queue ORDER BY queue_seq").fetchall()
        if all(r["status"] in ("completed", "failed", "cancelled") for r in runs):
            return runs
        if time.monotonic() > deadline:
            raise AssertionError(f"runs not settled: {[(r['id'], r['status']) for r in runs]}")
        time.sleep(0.1)


def _check_invariants(db: psycopg.Connection[dict[str, Any]]) -> None:
    runs = _settled(db)
    spawns = db.execute("SELECT * FROM subagent_spawns").fetchall()
    assert len(spawns) == 1, spawns  # one child per spawn call
    [spawn] = spawns
    children = [r for r in runs if r["parent_run_id"] is not None]
    assert [c["id"] for c in children] == [spawn["child_run_id"]]
    assert spawn["status"] == "completed" and spawn["result"] == {"text": "forty-two"}

    # the outcome is in the parent's conversation exactly once: a wait result or an injection
    rows = db.execute(
        "SELECT payload FROM session_messages WHERE session_id = %s ORDER BY seq",
        (spawn["parent_session_id"],),
    ).fetchall()
    child = str(spawn["child_run_id"])
    waited = [
        r["payload"]
        for r in rows
        if r["payload"]["kind"] == "tool_result"
        and r["payload"]["name"] == "sessions_wait"
        and child in json.dumps(r["payload"].get("result"))
    ]
    injected = [
        r["payload"]
        for r in rows
        if r["payload"]["kind"] == "user"
        and (r["payload"].get("source") or {}).get("kind") == "subagent"
    ]
    assert len(waited) + len(injected) == 1, json.dumps([r["payload"] for r in rows], indent=1)
    inbox = db.execute("SELECT * FROM run_inbox WHERE source_run_id = %s", (child,)).fetchall()
    assert len(inbox) == 1 and inbox[0]["delivery"] in ("tool", "injected"), inbox
    completed = db.execute(
        "SELECT count(*) AS n FROM run_events WHERE type = 'subagent.completed'"
    ).fetchone()
    assert completed is not None and completed["n"] == 1

    # every call has exactly one result, in every session
    for session in db.execute("SELECT id FROM agent_sessions").fetchall():
        messages = [
            r["payload"]
            for r in db.execute(
                "SELECT payload FROM session_messages WHERE session_id = %s ORDER BY seq",
                (session["id"],),
            ).fetchall()
        ]
        calls = [c["id"] for m in messages if m["kind"] == "assistant" for c in m["toolCalls"]]
        results = [m["toolCallId"] for m in messages if m["kind"] == "tool_result"]
        assert sorted(calls) == sorted(results), messages

    # event logs without gaps or duplicates
    for run in runs:
        seqs = [
            r["seq"]
            for r in db.execute(
                "SELECT seq FROM run_events WHERE run_id = %s ORDER BY seq", (run["id"],)
            ).fetchall()
        ]
        assert seqs == list(range(1, len(seqs) + 1)), (run["id"], seqs)


@pytest.mark.parametrize(
    "failpoint", [TOOL_AFTER_RUN, CHILD_FINISH_BEFORE_COMMIT, CHILD_FINISH_AFTER_COMMIT]
)
def test_spawn_and_wait_survive_a_kill_9(
    stack: Stack, db: psycopg.Connection[dict[str, Any]], failpoint: str
) -> None:
    run = _crash_then_recover(stack, failpoint, WAIT_FOR_CHILD)
    final = stack.wait_status(run["runId"], {"completed", "failed"}, timeout=40)
    assert final["status"] == "completed", final
    assert "forty-two" in final["result"]["text"]
    _check_invariants(db)


@pytest.mark.parametrize("failpoint", [INJECT_BEFORE_COMMIT, INJECT_AFTER_COMMIT])
def test_an_injected_outcome_survives_a_kill_9(
    stack: Stack, db: psycopg.Connection[dict[str, Any]], failpoint: str
) -> None:
    run = _crash_then_recover(stack, failpoint, INJECT_CHILD)
    final = stack.wait_status(run["runId"], {"completed", "failed"}, timeout=40)
    assert final["status"] == "completed", final
    _check_invariants(db)
    injected = db.execute(
        "SELECT count(*) AS n FROM run_events WHERE type = 'message.injected'"
    ).fetchone()
    assert injected is not None and injected["n"] == 1
