"""The workbench's sessions, in real Chromium: the list (search, open one with its history and
tool cards), a reload in the middle of a run that resumes without losing or repeating output,
and a sub-agent's session nested under its parent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.e2e.browser_support import chromium_context, save_screenshot
from tests.e2e.conftest import Stack, stack_per_user
from tests.e2e.workbench_support import open_workbench, signed_in_page

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

# one API + workers for the module; each test is a user (and tenant) of its own
stack = pytest.fixture(stack_per_user)


# four turns, the last three each started after a pause: the run lasts ~3.5 s, long enough to
# reload the page in the middle of it; its answer has one line per file read
SLOW = "\n".join(
    [
        '/tool write_file {"path": "part1.txt", "content": "Part A"}',
        "/next",
        "/sleep 1500",
        '/tool write_file {"path": "part2.txt", "content": "Part B"}',
        "/next",
        "/sleep 1500",
        '/tool read_file {"path": "part1.txt"}',
        '/tool read_file {"path": "part2.txt"}',
        "/next",
        "/sleep 500",
    ]
)


@contextmanager
def workbench(stack: Stack, fragment: str = "") -> Iterator[tuple[Page, list[str]]]:
    """A signed-in page of the workbench (at `/#fragment`), and its console lines."""
    with chromium_context() as browser:
        console: list[str] = []
        page = signed_in_page(browser, stack, console)
        open_workbench(page, stack, fragment)
        yield page, console
        assert not [line for line in console if line.startswith("error")], console


def session_row(page: Page, key: str):  # type: ignore[no-untyped-def]
    return page.locator(f'#sessions-panel .session-row[data-session-key="{key}"]')


def test_a_session_from_the_list_opens_with_its_history(stack: Stack) -> None:
    first = stack.post(
        '/tool write_file {"path": "notes.md", "content": "remember the milk"}',
        sessionKey="alpha-notes",
    )
    stack.wait_status(first["runId"], {"completed"})
    second = stack.post("Second message in **alpha**", sessionKey="alpha-notes")
    stack.wait_status(second["runId"], {"completed"})
    other = stack.post("Hello from beta", sessionKey="beta-chat")
    stack.wait_status(other["runId"], {"completed"})

    with workbench(stack) as (page, _console):
        panel = page.locator("#sessions-panel")
        expect(session_row(page, "beta-chat")).to_be_visible()
        expect(session_row(page, "alpha-notes")).to_contain_text("6 messages")
        # newest first
        expect(panel.locator(".session-row")).to_have_count(2)
        assert panel.locator(".session-row").first.get_attribute("data-session-key") == (
            "beta-chat"
        )

        session_row(page, "alpha-notes").click()
        expect(session_row(page, "alpha-notes")).to_have_attribute("aria-current", "true")
        expect(session_row(page, "beta-chat")).not_to_have_attribute("aria-current", "true")
        messages = page.locator("#messages")
        expect(messages.locator(".msg.user")).to_have_count(2)
        expect(messages.locator(".msg.user").first).to_contain_text("write_file")
        card = messages.locator(".tool-card")
        expect(card).to_have_count(1)
        expect(card).to_have_class("tool-card completed")
        expect(card.locator(".tool-name")).to_have_text("write_file")
        expect(card.locator(".tool-args pre")).to_contain_text("remember the milk")
        answers = messages.locator(".msg.assistant")
        expect(answers).to_have_count(2)
        expect(answers.first).to_contain_text("write_file ok")
        expect(answers.last).to_contain_text("You said: Second message in alpha")
        expect(answers.last.locator("strong")).to_have_text("alpha")
        assert "Hello from beta" not in messages.inner_text()
        assert page.evaluate("location.hash") == "#session=alpha-notes"

        # search narrows the list (and clearing it brings the rest back)
        search = page.get_by_role("searchbox", name="Search sessions")
        search.fill("BETA")
        expect(panel.locator(".session-row")).to_have_count(1)
        expect(session_row(page, "beta-chat")).to_be_visible()
        search.fill("no-such-session")
        expect(panel.locator(".session-row")).to_have_count(0)
        expect(panel.locator(".sessions-status")).to_contain_text("No session matches")
        search.fill("")
        expect(panel.locator(".session-row")).to_have_count(2)

        # another session replaces the conversation
        session_row(page, "beta-chat").click()
        expect(messages.locator(".msg.user")).to_have_count(1)
        expect(messages.locator(".msg.user")).to_have_text("Hello from beta")
        expect(messages.locator(".tool-card")).to_have_count(0)

        # a reload reopens the session in the URL, with the same history once
        page.reload()
        expect(page.locator("body[data-ready=true]")).to_be_attached()
        expect(session_row(page, "beta-chat")).to_have_attribute("aria-current", "true")
        expect(messages.locator(".msg.assistant")).to_have_text("You said: Hello from beta")
        expect(messages.locator(".msg.user")).to_have_count(1)

        # "New session" empties the chat and the URL; a message there makes a new session
        panel.get_by_role("button", name="New session").click()
        expect(messages.locator(".msg")).to_have_count(0)
        assert page.evaluate("location.hash") == ""
        page.get_by_role("textbox", name="Message").fill("A fresh start")
        page.get_by_role("button", name="Send").click()
        expect(page.locator("[data-run-end='run.completed']")).to_be_visible(timeout=30_000)
        expect(panel.locator(".session-row")).to_have_count(3)
        expect(panel.locator(".session-row[aria-current=true]")).to_contain_text("2 messages")


def test_paging_with_load_more(stack: Stack) -> None:
    runs = [stack.post("hi", sessionKey=f"paged-{i:02d}") for i in range(33)]
    for run in runs:
        stack.wait_status(run["runId"], {"completed"})
    with workbench(stack) as (page, _console):
        rows = page.locator("#sessions-panel .session-row")
        expect(rows).to_have_count(30)
        more = page.get_by_role("button", name="Load more")
        more.click()
        expect(rows).to_have_count(33)
        expect(more).to_be_hidden()
        expect(rows.last).to_have_attribute("data-session-key", "paged-00")


def test_reload_mid_run_resumes_without_losing_or_repeating_output(stack: Stack) -> None:
    with workbench(stack) as (page, _console):
        messages = page.locator("#messages")
        page.get_by_role("textbox", name="Message").fill(SLOW)
        page.get_by_role("button", name="Send").click()
        # the first tool has run; the run is sleeping before its second turn
        expect(messages.locator(".tool-card.completed")).to_have_count(1, timeout=30_000)
        key = page.evaluate("new URLSearchParams(location.hash.slice(1)).get('session')")
        assert key, page.url
        page.reload()
        expect(page.locator("body[data-ready=true]")).to_be_attached()
        # the reloaded page picked the run up while it was still going
        expect(page.locator("#run-status")).to_contain_text("run: running", timeout=10_000)
        assert page.locator("[data-run-end]").count() == 0
        expect(session_row(page, key)).to_have_attribute("aria-current", "true")
        expect(session_row(page, key)).to_contain_text("live")

        expect(page.locator("[data-run-end='run.completed']")).to_have_count(1, timeout=30_000)
        expect(messages.locator(".msg.user")).to_have_count(1)
        expect(messages.locator(".msg.user")).to_contain_text('/tool write_file {"path"')
        cards = messages.locator(".tool-card")
        expect(cards).to_have_count(4)
        expect(messages.locator(".tool-card.completed")).to_have_count(4)
        names = cards.locator(".tool-name").all_inner_texts()
        assert names == ["write_file", "write_file", "read_file", "read_file"], names
        answer = messages.locator(".msg.assistant")
        expect(answer).to_have_count(1)
        expect(answer).to_contain_text('"content": "Part A"')
        expect(answer).to_contain_text('"content": "Part B"')
        text = messages.inner_text()
        assert text.count('"content": "Part A"') == 2, text  # its card's arguments, the answer
        assert text.count("read_file ok:") == 2, text
        # the live run's output came from its stream only (no stored row shown for it)
        assert messages.locator("[data-from=transcript]").count() == 0

        # and a second reload, after the end, shows the same conversation from the transcript
        page.reload()
        expect(page.locator("body[data-ready=true]")).to_be_attached()
        expect(messages.locator(".tool-card")).to_have_count(4)
        expect(messages.locator(".msg.user")).to_have_count(1)
        expect(messages.locator(".msg.assistant")).to_have_count(1)
        expect(messages.locator(".msg.assistant")).to_contain_text('"content": "Part B"')


def test_a_sub_agent_session_is_nested_under_its_parent(stack: Stack) -> None:
    spawn = json.dumps({"task": "/answer 42", "label": "counter"})
    for key, text in [("weekly-report", "Draft the weekly report"), ("notes", "Hi")]:
        stack.wait_status(stack.post(text, sessionKey=key)["runId"], {"completed"})
    with workbench(stack) as (page, _console):
        page.get_by_role("textbox", name="Message").fill(f"/tool sessions_spawn {spawn}")
        page.get_by_role("button", name="Send").click()
        expect(page.locator("[data-run-end='run.completed']").first).to_be_visible(timeout=30_000)
        key = page.evaluate("new URLSearchParams(location.hash.slice(1)).get('session')")
        parent = session_row(page, key).locator("xpath=..")  # its tree node
        child = parent.locator(".session-children .session-row")
        expect(child).to_have_count(1, timeout=15_000)
        child_key = child.get_attribute("data-session-key")
        assert child_key and child_key.startswith(f"{key}:sub:")
        expect(child).to_have_attribute("title", f"{child_key}: sub-agent of {key}")
        expect(child.locator(".session-name")).to_have_text(child_key.removeprefix(f"{key}:"))
        # the child is not also listed at the top level
        top = page.locator("#sessions-panel .session-tree > .session-node > .session-row")
        assert child_key not in [r.get_attribute("data-session-key") for r in top.all()]
        # the child's outcome reaches the parent's conversation (a follow-up run)
        expect(page.locator("#messages")).to_contain_text("Noted:", timeout=30_000)
        injected = page.locator("#messages .msg.injected")
        expect(injected).to_have_count(1)
        expect(injected).to_contain_text("From a sub-agent: [sub-agent counter completed")
        page.wait_for_timeout(1000)
        expect(injected).to_have_count(1)
        expect(page.locator("#messages")).to_contain_text("Noted:")
        assert page.locator("#messages").inner_text().count("Noted:") == 1

        # opening the child shows its own conversation
        child.click()
        expect(page.locator("#messages .msg.user")).to_have_text("/answer 42")
        expect(page.locator("#messages .msg.assistant")).to_have_text("42", timeout=15_000)
        expect(child).to_have_attribute("aria-current", "true")

        session_row(page, key).click()
        expect(page.locator("#messages .tool-card .tool-name")).to_have_text("sessions_spawn")
        expect(page.locator("#messages .msg.injected")).to_have_count(1)
        expect(page.locator("#messages .msg.injected")).to_contain_text("From a sub-agent")
        expect(page.locator("#run-status")).to_contain_text("idle")
        save_screenshot(page, "workbench-sessions.png", full_page=True)

        # at phone width the panel stacks under the chat, its rows inside the screen
        page.set_viewport_size({"width": 390, "height": 844})
        row = session_row(page, key)
        row.scroll_into_view_if_needed()
        expect(row).to_be_visible()
        box = row.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
        save_screenshot(page, "workbench-sessions-phone.png", full_page=True)

    # the API names the parent from the spawn row
    r = httpx.get(
        f"{stack.base_url}/api/agent-runtime/sessions/{quote(child_key)}",
        headers=stack.headers(),
        timeout=10,
    )
    assert r.json()["parentSessionKey"] == key


@pytest.mark.parametrize("held", ["messages", "second session read"])
def test_a_run_ending_while_the_page_reads_is_shown_once(stack: Stack, held: str) -> None:
    """The page reads the session (its live run), then the transcript, then the session again.
    Hold one of the later reads until the live run has ended: the run must still be shown
    exactly once, completely."""
    run = stack.post(SLOW, sessionKey="racy")
    stack.wait_status(run["runId"], {"running"})
    session_reads = 0

    def hold(route) -> None:  # type: ignore[no-untyped-def]
        nonlocal session_reads
        is_messages = route.request.url.split("?")[0].endswith("/messages")
        if not is_messages:
            session_reads += 1
        if (held == "messages" and is_messages) or (
            held == "second session read" and not is_messages and session_reads == 2
        ):
            stack.wait_status(run["runId"], {"completed"}, timeout=30)
        route.continue_()

    with chromium_context() as browser:
        page = browser.new_page()
        console: list[str] = []
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        page.add_init_script(
            f"sessionStorage.setItem('agent-runtime.token', {json.dumps(stack.token())});"
        )
        page.route("**/api/agent-runtime/sessions/racy**", hold)
        page.goto(f"{stack.base_url}/#session=racy")
        expect(page.locator("body[data-ready=true]")).to_be_attached()
        messages = page.locator("#messages")
        expect(messages.locator(".msg.assistant")).to_contain_text("Part B", timeout=30_000)
        expect(messages.locator(".tool-card.completed")).to_have_count(4)
        page.wait_for_timeout(1000)  # anything shown twice would be there by now
        assert session_reads >= 2
        expect(messages.locator(".msg.user")).to_have_count(1)
        expect(messages.locator(".tool-card")).to_have_count(4)
        expect(messages.locator(".msg.assistant")).to_have_count(1)
        assert messages.locator("[data-run-end]").count() <= 1
        assert messages.inner_text().count("read_file ok:") == 2
    assert not [line for line in console if line.startswith("error")], console


def test_opening_a_session_shows_its_agent_in_the_picker(stack: Stack) -> None:
    r = httpx.post(
        f"{stack.base_url}/api/agent-runtime/agents",
        headers=stack.headers(),
        json={"name": "writer"},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    writer = r.json()["id"]
    done = stack.post("Hello writer", sessionKey="gamma", agentId=writer)
    stack.wait_status(done["runId"], {"completed"})
    done = stack.post("Hello default", sessionKey="delta")
    stack.wait_status(done["runId"], {"completed"})

    with workbench(stack) as (page, _console):
        picker = page.get_by_role("combobox", name="Agent")
        expect(picker).to_have_value("")
        session_row(page, "gamma").click()
        expect(picker).to_have_value(writer)
        session_row(page, "delta").click()
        expect(picker).to_have_value("")
        # opened from the URL on load, before the agent list may have arrived
        page.goto(f"{stack.base_url}/#session=gamma")
        page.reload()
        expect(page.locator("body[data-ready=true]")).to_be_attached()
        expect(picker).to_have_value(writer)
