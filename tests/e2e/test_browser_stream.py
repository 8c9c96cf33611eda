"""A web page on another origin follows a run in real Chromium with the browser's own
`EventSource` and a stream ticket, through two dropped connections: the test cuts a proxy
between the page and the API mid-run (events happen while the page is away), then restarts the
API process itself (the new process verifies the old one's ticket). EventSource reconnects by
itself with `Last-Event-ID`, and the page ends with every event exactly once, in order."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.e2e.browser_support import CuttableProxy, chromium_context, page_server
from tests.e2e.conftest import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]

PAGE = (Path(__file__).parent / "stream_page.html").read_text()
# Three phases of several seconds each: two tool calls (a sandboxed `sleep`), then the answer.
MESSAGE = "\n".join(
    [
        '/tool run_shell {"command": "sleep 3 && echo first"}',
        '/tool run_shell {"command": "sleep 3 && echo second"}',
        "/sleep 5000",
    ]
)


@pytest.fixture
def page_origin() -> Iterator[str]:
    with page_server(PAGE) as origin:
        yield origin


@pytest.fixture
def stack_env(page_origin: str) -> dict[str, str]:
    # the page's origin may call the API; sandboxed commands as plain subprocesses (only `sleep`)
    return {"CORS_ORIGINS": page_origin, "SANDBOX_MODE": "unsafe-subprocess"}


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def stored_events(stack: Stack, run_id: str) -> list[dict[str, Any]]:
    r = httpx.get(
        f"{stack.base_url}/api/agent-runtime/runs/{run_id}/events",
        params={"limit": 500},
        headers=stack.headers(),
        timeout=10,
    )
    assert r.status_code == 200, r.text
    events: list[dict[str, Any]] = r.json()["events"]
    return events


def test_a_page_follows_a_run_through_dropped_connections(
    stack: Stack, page_origin: str, tmp_path: Path
) -> None:
    assert stack.api is not None
    proxy = CuttableProxy(int(stack.base_url.rsplit(":", 1)[1]))
    run = stack.post(MESSAGE)
    run_id = run["runId"]
    r = httpx.post(
        f"{stack.base_url}/api/agent-runtime/stream-tickets",
        json={"runId": run_id},
        headers=stack.headers(),
        timeout=10,
    )
    assert r.status_code == 201, r.text
    ticket = r.json()["ticket"]

    with chromium_context() as browser:
        page = browser.new_page()
        console: list[str] = []
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        page.goto(f"{page_origin}/#api={proxy.url}&runId={run_id}&ticket={ticket}")

        def received() -> list[dict[str, Any]]:
            events: list[dict[str, Any]] = page.evaluate("window.received")
            return events

        def page_saw(type_: str, count: int = 1) -> bool:
            return [e["type"] for e in received()].count(type_) >= count

        def run_stored(type_: str, count: int = 1) -> bool:
            return [e["type"] for e in stored_events(stack, run_id)].count(type_) >= count

        try:
            # Cut 1, while the first tool runs: the page is away until that tool has finished.
            wait_for("the first tool call on the page", lambda: page_saw("tool.started"))
            proxy.cut()
            seen_before_cut_1 = len(received())
            wait_for("the first tool result", lambda: run_stored("tool.completed"))
            proxy.resume()

            # Cut 2, while the model "thinks" after the tools: the API process itself restarts,
            # and the page stays away until the run has ended.
            wait_for("the second tool result on the page", lambda: page_saw("tool.completed", 2))
            proxy.cut()
            seen_before_cut_2 = len(received())
            stack.restart_api()
            wait_for("the run's end", lambda: run_stored("run.completed"))
            proxy.resume()

            wait_for("the page to finish", lambda: bool(page.evaluate("window.done")), 60)
        except AssertionError:
            raise AssertionError(
                f"page: {received()}\nconsole: {console}\nlogs:\n{stack.logs()}"
            ) from None
        events = received()
        opens, errors = page.evaluate("[window.opens, window.errors]")
        shot = Path(os.environ.get("BROWSER_STREAM_SCREENSHOT") or tmp_path / "page.png")
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot), full_page=True)

    # every event exactly once, in order, as stored
    stored = stored_events(stack, run_id)
    seqs = [int(e["id"]) for e in events]
    assert seqs == list(range(1, len(stored) + 1)), seqs
    assert [e["data"] for e in events] == stored  # the same JSON objects as /runs/{id}/events
    assert all(e["type"] == e["data"]["type"] for e in events)
    assert events[-1]["type"] == "run.completed"
    assert [e["type"] for e in events].count("tool.completed") == 2
    # the cuts landed mid-run, with events on both sides of each
    assert 0 < seen_before_cut_1 < seen_before_cut_2 < len(events)
    assert opens >= 3 and errors >= 2, (opens, errors)

    # EventSource reconnected by itself, resuming after the last event it had
    streams = [q for q in proxy.requests() if q.method == "GET" and "/stream?" in q.target]
    resumed_after = [
        int(q.headers["last-event-id"]) for q in streams if "last-event-id" in q.headers
    ]
    assert "last-event-id" not in streams[0].headers
    assert seen_before_cut_1 in resumed_after and seen_before_cut_2 in resumed_after, resumed_after
    for q in streams:  # the ticket in the URL, the page's origin, and no Authorization
        query = parse_qs(urlsplit(q.target).query)
        assert query == {"runId": [run_id], "ticket": [ticket]}
        assert q.headers.get("origin") == page_origin
        assert "authorization" not in q.headers
    proxy.close()
    for log in stack.log_dir.glob("*.log"):
        assert ticket not in log.read_text(errors="replace"), log.name


def readme_snippet() -> str:
    """The JavaScript of the README's "Use it from a web app" section."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Use it from a web app", 1)[1]
    return section.split("```js\n", 1)[1].split("```", 1)[0]


def test_the_readme_snippet_works_from_another_origin(stack: Stack, page_origin: str) -> None:
    snippet = readme_snippet()
    assert 'const API = "http://127.0.0.1:8000";' in snippet
    snippet = snippet.replace("http://127.0.0.1:8000", stack.base_url)
    with chromium_context() as browser:
        page = browser.new_page()
        lines: list[str] = []
        page.on("console", lambda m: lines.append(m.text))
        page.goto(f"{page_origin}/#")  # the page only provides an origin here
        page.add_script_tag(content=f"const TOKEN = {json.dumps(stack.token())};\n{snippet}")
        # (console events are delivered while Playwright waits, not during time.sleep)
        wait_for(
            "the snippet's run to end",
            lambda: page.wait_for_timeout(50) or any("run.completed" in x for x in lines),
        )
    printed = [line.split(" ", 2)[:2] for line in lines if line.split(" ", 1)[0].isdigit()]
    assert printed and printed[-1][1] == "run.completed", lines
    run_id = page_log_run_id(lines)
    listened = [e for e in stored_events(stack, run_id) if f'"{e["type"]}"' in snippet]
    assert [(int(seq), type_) for seq, type_ in printed] == [
        (e["seq"], e["type"]) for e in listened
    ]
    assert any(type_ == "assistant.delta" for _, type_ in printed)


def page_log_run_id(lines: list[str]) -> str:
    """The run id in the snippet's console output (`… runId: <uuid>, …`)."""
    for line in lines:
        if "runId: " in line:
            return line.split("runId: ", 1)[1].split(",", 1)[0]
    raise AssertionError(f"no run id in {lines}")
