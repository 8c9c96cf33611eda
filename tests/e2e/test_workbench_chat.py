"""The workbench page at `/`, in real Chromium: sign in with a token, send a message, watch the
offline model's answer stream in and the run complete; a tool call shows as a card."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import expect

from tests.e2e.browser_support import chromium_context, save_screenshot
from tests.e2e.conftest import Stack, stack_per_user
from tests.e2e.workbench_support import open_workbench, signed_in_page

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

# one API + workers for the module; each test is a user (and tenant) of its own
stack = pytest.fixture(stack_per_user)


def test_the_page_is_served_at_root_and_stays_out_of_the_api(stack: Stack) -> None:
    r = httpx.get(f"{stack.base_url}/", timeout=10)
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert httpx.get(f"{stack.base_url}/workbench/main.js", timeout=10).status_code == 200
    # a configured SUPABASE_JWT_SECRET: the page must paste a token, and nothing mints one
    assert httpx.get(f"{stack.base_url}/workbench/config.json").json() == {"auth": "token"}
    r = httpx.post(
        f"{stack.base_url}/workbench/dev-token", headers={"Sec-Fetch-Site": "same-origin"}
    )
    assert r.status_code == 404
    paths = httpx.get(f"{stack.base_url}/openapi.json", timeout=10).json()["paths"]
    assert "/" not in paths and not any(p.startswith("/workbench") for p in paths)


def test_chat_streams_an_answer_and_a_tool_card(stack: Stack) -> None:
    with chromium_context() as browser:
        console: list[str] = []
        page = signed_in_page(browser, stack, console)
        open_workbench(page, stack)

        page.get_by_role("textbox", name="Message").fill(
            "Hello **workbench** <img src=x onerror=alert(1)>"
        )
        page.get_by_role("button", name="Send").click()
        try:
            expect(page.locator("[data-run-end='run.completed']")).to_be_visible(timeout=30_000)
        except AssertionError:
            raise AssertionError(f"console: {console}\nlogs:\n{stack.logs()}") from None
        answer = page.locator(".msg.assistant").last
        expect(answer).to_contain_text("You said: Hello workbench <img src=x onerror=alert(1)>")
        # Markdown rendered as elements, the model's HTML left as text
        expect(answer.locator("strong")).to_have_text("workbench")
        assert answer.locator("img").count() == 0
        expect(page.locator("#run-status")).to_contain_text("run: completed")

        # a second message in the same session calls a tool: a card with its result
        page.get_by_role("textbox", name="Message").fill(
            '/think Let me write that down\n/tool write_file {"path": "notes.md", "content": "hi"}'
        )
        page.get_by_role("button", name="Send").click()
        expect(page.locator("[data-run-end='run.completed']")).to_have_count(2, timeout=30_000)
        card = page.locator(".tool-card").last
        expect(card).to_have_class("tool-card completed")
        expect(card.locator(".tool-name")).to_have_text("write_file")
        expect(page.locator("details.thinking").last).not_to_have_attribute("open", "")

        save_screenshot(page, "workbench-chat.png", full_page=True)
    assert not [line for line in console if line.startswith("error")], console
