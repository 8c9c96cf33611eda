"""A stream ticket leaves no trace in the logs of a real `agent-runtime api` process (uvicorn's
access log prints every request line with its query string)."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.conftest import Stack

pytestmark = pytest.mark.e2e


def test_a_ticket_never_reaches_the_logs(stack: Stack) -> None:
    run = stack.post("hello, ticket")
    r = httpx.post(
        f"{stack.base_url}/api/agent-runtime/stream-tickets",
        json={"runId": run["runId"]},
        headers=stack.headers(),
        timeout=10,
    )
    assert r.status_code == 201, r.text
    ticket = r.json()["ticket"]
    stream_url = f"{stack.base_url}/api/agent-runtime/stream"
    with httpx.stream(
        "GET", stream_url, params={"runId": run["runId"], "ticket": ticket}, timeout=30
    ) as response:
        assert response.status_code == 200
        body = "".join(response.iter_text())
    assert "event: run.completed" in body
    # refused uses are logged too: as a bearer token, on another route, for another run
    as_bearer = {"Authorization": f"Bearer {ticket}"}
    status_url = f"{stack.base_url}/api/agent-runtime/status"
    assert httpx.get(status_url, params={"runId": run["runId"]}, headers=as_bearer).is_error
    assert httpx.get(status_url, params={"runId": run["runId"], "ticket": ticket}).is_error
    other = stack.post("another run")
    assert httpx.get(stream_url, params={"runId": other["runId"], "ticket": ticket}).is_error
    stack.stop()  # flush and close every log

    logs = {p.name: p.read_text(errors="replace") for p in stack.log_dir.glob("*.log")}
    api_log = logs["api.log"]
    assert "/api/agent-runtime/stream?runId=" in api_log, api_log[-3000:]  # the access log is on
    assert api_log.count("ticket=***") >= 3, api_log[-3000:]
    for name, text in logs.items():
        assert ticket not in text, name
        assert ticket.split(".")[2] not in text, name  # not even its signature
