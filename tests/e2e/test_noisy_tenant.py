"""One tenant's approval regex cannot stall a worker that serves other tenants.

Reported from fuzzing: `(a|a)*b` as an allowlist regex, matched by Python's backtracking engine
inside the worker's event loop against a 30-character argument, blocked the whole process (each
extra character doubles the time), and with it every other tenant's runs. Tenant patterns are now
matched by RE2; this drives the attack through the real API and a single worker process.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.e2e.conftest import Stack

# Measured against a deadline: never beside another test (`make test` runs these after the
# parallel part).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

EVIL_RULE = {"tool": "run_shell", "arg": "command", "allowRegex": ["(a|a)*b"]}


def test_a_catastrophic_approval_regex_does_not_delay_another_tenant(stack: Stack) -> None:
    stack.workers.pop("w2").terminate()  # one worker serves both tenants
    r = httpx.put(
        f"{stack.base_url}/api/agent-runtime/policies",
        json={"requireApproval": {"args": [EVIL_RULE]}},
        headers=stack.headers("mallory"),
        timeout=10,
    )
    assert r.status_code == 200, r.text
    command = json.dumps({"command": "a" * 30})
    evil = stack.post(f"/tool run_shell {command}", user="mallory", sessionKey="attack")
    # not allowlisted (and decided at once): the call waits for a human
    stack.wait_status(evil["runId"], {"awaiting_approval"}, timeout=15, user="mallory")

    started = time.monotonic()
    plain = stack.post("hello", user="alice")
    done = stack.wait_status(plain["runId"], {"completed", "failed"}, timeout=10)
    assert done["status"] == "completed", stack.logs()
    assert time.monotonic() - started < 5
