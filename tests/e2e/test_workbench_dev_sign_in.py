"""`agent-runtime serve` as `make run` starts it (embedded Postgres, generated secret, no
DATABASE_URL or SUPABASE_JWT_SECRET): the workbench at `/` signs in as the dev user by itself in
real Chromium and a message completes; a token is not handed to a non-browser client."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from tests.e2e.browser_support import chromium_context
from tests.e2e.conftest import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
UNSET = ("DATABASE_URL", "SUPABASE_JWT_SECRET", "SUPABASE_URL", "SUPABASE_ANON_KEY", "HOST")


@pytest.fixture
def serve() -> Iterator[str]:
    """`serve` on a fresh embedded database in a short data dir; yields its URL."""
    data_dir = Path(tempfile.mkdtemp(prefix="wbd-", dir="/tmp"))  # short: the pg socket is here
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in UNSET and k != "WORKBENCH_DEV_SIGN_IN"}
    env.update(
        {"AGENT_RUNTIME_DATA_DIR": str(data_dir), "PORT": str(port), "WORKERS": "1"},
        SHUTDOWN_GRACE_SECONDS="2",
    )
    out = data_dir / "serve.log"
    with out.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve"],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while "Ctrl-C stops everything" not in out.read_text():
            assert proc.poll() is None, out.read_text()[-3000:]
            assert time.monotonic() < deadline, out.read_text()[-3000:]
            time.sleep(0.2)
        url = f"http://127.0.0.1:{port}"
        assert f"{url}/" in out.read_text(), "the banner prints the workbench URL"
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: serve stops its children and Postgres
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(data_dir, ignore_errors=True)


def test_the_page_signs_in_as_the_dev_user_and_a_message_completes(serve: str) -> None:
    # a non-browser client (no Sec-Fetch-Site: same-origin) gets nothing
    r = httpx.post(f"{serve}/workbench/dev-token", timeout=10)
    assert r.status_code == 404
    assert httpx.get(f"{serve}/workbench/config.json", timeout=10).json() == {"auth": "token"}

    with chromium_context() as browser:
        page = browser.new_page()
        console: list[str] = []
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        page.goto(f"{serve}/")
        expect(page.locator("body[data-ready=true]")).to_be_attached(timeout=15_000)
        expect(page.locator("#signin")).to_have_text("signed in as dev (local dev)")
        page.get_by_role("textbox", name="Message").fill("hello from make run")
        page.get_by_role("button", name="Send").click()
        expect(page.locator("[data-run-end='run.completed']")).to_be_visible(timeout=30_000)
        expect(page.locator(".msg.assistant").last).to_contain_text("You said: hello from make run")
    assert not [line for line in console if line.startswith("error")], console
