"""The workbench's accessibility, in real Chromium: the axe-core audit of every view at desktop
(1280x900) and phone (390x844) width with no serious or critical violation and nothing wider
than the phone's screen; a whole flow done by keyboard alone, with visible focus; and the live
regions (a streaming answer is busy until whole, the run's status is announced once per change)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.browser_support import chromium_context, save_screenshot
from tests.e2e.conftest import Stack, stack_per_user
from tests.e2e.workbench_support import DESKTOP, api, open_workbench, signed_in_page

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# one API + workers for the module; each test is a user (and tenant) of its own
stack = pytest.fixture(stack_per_user)

AXE = Path(__file__).resolve().parent / "ai_sdk" / "node_modules" / "axe-core" / "axe.min.js"
PHONE = {"width": 390, "height": 844}
SERIOUS = {"serious", "critical"}


class Audit:
    """Runs axe-core on a page at both widths; collects what it finds."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.failures: list[str] = []
        self.minor: dict[str, set[str]] = {}  # moderate/minor rule id -> the views it was seen in

    def check(self, view: str) -> None:
        for name, size in (("desktop", DESKTOP), ("phone", PHONE)):
            self.page.set_viewport_size(size)
            self.page.wait_for_timeout(150)  # the layout settles
            if name == "phone":
                width = self.page.evaluate("document.documentElement.scrollWidth")
                if width > PHONE["width"]:
                    wide = self.page.evaluate(
                        """() => [...document.querySelectorAll('body *')]
                          .filter((e) => e.getBoundingClientRect().right > 391)
                          .slice(0, 5).map((e) => e.tagName + '.' + e.className)"""
                    )
                    self.failures.append(f"{view} @ phone: {width}px wide, e.g. {wide}")
            if not self.page.evaluate("typeof window.axe === 'object'"):
                self.page.add_script_tag(content=AXE.read_text())
            violations, unsure, passes = self.run_axe()
            assert passes > 10, passes  # the checker ran
            for v in unsure:  # what axe could not decide (e.g. contrast over an image)
                note = f"{view}: {v['targets']}"
                self.minor.setdefault(f"{v['id']} (needs review)", set()).add(note)
            for v in violations:
                if v["impact"] in SERIOUS:
                    self.failures.append(
                        f"{view} @ {name}: {v['id']} ({v['impact']}): {v['help']} at {v['targets']}"
                    )
                else:
                    self.minor.setdefault(f"{v['id']} ({v['impact']})", set()).add(view)
        self.page.set_viewport_size(DESKTOP)

    def run_axe(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
        """axe-core's violations, its undecided checks, and how many rules passed."""
        result = self.page.evaluate(
            """async () => {
                 const r = await axe.run(document, {runOnly: {type: 'tag', values: [
                   'wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa', 'best-practice']}});
                 const brief = (v) => ({id: v.id, impact: v.impact, help: v.help,
                   targets: v.nodes.slice(0, 4).map((n) => n.target.join(' '))});
                 return [r.violations.map(brief), r.incomplete.map(brief), r.passes.length];
               }"""
        )
        return result[0], result[1], result[2]


@pytest.fixture
def page(stack: Stack) -> Iterator[Page]:
    with chromium_context(bypass_csp=True) as browser:
        console: list[str] = []
        p = signed_in_page(browser, stack, console, DESKTOP)
        yield p
        assert not [line for line in console if line.startswith("error")], console


def run_end(page: Page, count: int = 1) -> None:
    expect(page.locator("[data-run-end='run.completed']")).to_have_count(count, timeout=40_000)


def test_every_view_passes_the_axe_audit_at_both_widths(stack: Stack, page: Page) -> None:
    if not AXE.exists():
        pytest.skip("axe-core is not installed (npm missing: `make npmdeps`)")
    write = json.dumps({"path": "notes.md", "content": "# Notes\n\n- milk"})
    for text in (f"/tool write_file {write}", "Some **bold** and `code`\n\n- one\n- two"):
        stack.wait_status(stack.post(text, sessionKey="notes")["runId"], {"completed"})
    spawn = json.dumps({"task": "/answer 42", "label": "counter"})
    parent = stack.post(f"/tool sessions_spawn {spawn}", sessionKey="parent")
    stack.wait_status(parent["runId"], {"completed"})
    for content, importance in (("Deploys run from `main`.", 0.9), ("Alice likes tea.", 0.4)):
        api(stack, "POST", "/memory", {"content": content, "importance": importance})
    api(stack, "POST", "/agents", {"name": "planner", "mode": "plan"})

    audit = Audit(page)
    open_workbench(page, stack)
    expect(page.locator("#sessions-panel .session-row")).not_to_have_count(0)
    audit.check("empty page")

    child = page.locator("#sessions-panel .session-children .session-row")
    expect(child).to_have_count(1, timeout=20_000)
    audit.check("sessions tab with a sub-agent tree")

    page.locator('#sessions-panel .session-row[data-session-key="notes"]').click()
    messages = page.locator("#messages")
    expect(messages.locator(".tool-card")).to_have_count(1)
    expect(messages.locator(".msg.assistant strong")).to_have_text("bold")
    messages.locator(".tool-card details").first.evaluate("(d) => { d.open = true; }")
    audit.check("conversation with a tool card and Markdown")

    page.get_by_role("tab", name="Memory").click()
    expect(page.locator("#memory-panel .memory-entry")).to_have_count(2)
    audit.check("memory tab")
    page.locator("#memory-panel .memory-forget").first.click()
    confirm = page.locator("dialog.memory-confirm")
    expect(confirm).to_be_visible()
    audit.check("memory's forget dialog")
    confirm.get_by_role("button", name="Cancel").click()
    expect(confirm).to_be_hidden()
    page.get_by_role("tab", name="Agent").click()
    expect(page.locator("#agent-panel .tool-policy").first).to_be_visible()
    page.locator("#agent-panel summary", has_text="New agent").click()
    audit.check("agent tab")

    # a plan-mode agent's run: the plan panel
    page.locator("#agent-select").select_option(label="planner · plan")
    page.get_by_role("tab", name="Sessions").click()
    page.locator("#sessions-panel").get_by_role("button", name="New session").click()
    page.get_by_role("textbox", name="Message").fill("/plan look around; write it down")
    page.get_by_role("button", name="Send").click()
    run_end(page)
    expect(page.locator("#plan")).to_be_visible()
    audit.check("plan panel")

    # a gated call: the approval dialog
    api(stack, "PUT", "/policies", {"requireApproval": {"tools": ["write_file"]}})
    page.locator("#agent-select").select_option(index=0)
    page.locator("#sessions-panel").get_by_role("button", name="New session").click()
    page.get_by_role("textbox", name="Message").fill(f"/tool write_file {write}")
    page.get_by_role("button", name="Send").click()
    modal = page.get_by_role("dialog", name="Approve write_file?")
    expect(modal).to_be_visible(timeout=20_000)
    audit.check("approval dialog")
    modal.get_by_role("button", name="Later").click()
    banner = page.get_by_role("region", name="Pending approvals")
    expect(banner).to_be_visible()
    audit.check("pending approvals banner")
    # at phone width the banner leaves the message box and Send uncovered
    page.set_viewport_size(PHONE)
    page.get_by_role("navigation", name="Jump to").get_by_role("button", name="Chat").click()
    # a long conversation: the composer sticks to the bottom of the screen
    page.evaluate(
        """() => { const li = document.createElement('li');
                   li.className = 'msg note'; li.style.height = '2000px';
                   document.getElementById('messages').prepend(li); }"""
    )
    page.evaluate("window.scrollTo(0, 600)")
    for target in ("#send", "#message"):
        covered = page.evaluate(
            """(sel) => { const e = document.querySelector(sel), r = e.getBoundingClientRect();
                 return !e.contains(document.elementFromPoint(r.x + r.width / 2,
                                                              r.y + r.height / 2)); }""",
            target,
        )
        assert not covered, f"{target} is covered at phone width"
    expect(banner).to_be_in_viewport()
    page.evaluate("document.querySelector('#messages > li').remove()")
    page.set_viewport_size(DESKTOP)
    banner.get_by_role("button", name="Review").click()
    modal.get_by_role("button", name="Approve").click()
    run_end(page)

    # the audit can fail: a button with no name is a critical violation
    page.evaluate("document.querySelector('main').append(document.createElement('button'))")
    violations, _, _ = audit.run_axe()
    assert "button-name" in [v["id"] for v in violations if v["impact"] in SERIOUS], violations

    print("moderate/minor:", {rule: sorted(views) for rule, views in audit.minor.items()})
    assert not audit.failures, "\n".join(audit.failures)


FOCUSED = """() => {
  const e = document.activeElement;
  const s = getComputedStyle(e);
  return {tag: e.tagName, id: e.id, cls: String(e.className), text: (e.textContent || '').trim(),
          key: e.dataset?.sessionKey || null, inDialog: !!e.closest('dialog[open]'),
          outline: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 1};
}"""


class Keyboard:
    """Moves through the page with Tab / Shift+Tab only; checks each stop shows its focus."""

    def __init__(self, page: Page) -> None:
        self.page = page

    def focused(self) -> dict[str, Any]:
        return dict(self.page.evaluate(FOCUSED))

    def tab(self, back: bool = False) -> dict[str, Any]:
        self.page.keyboard.press("Shift+Tab" if back else "Tab")
        now = self.focused()
        assert now["tag"] == "BODY" or now["outline"], f"no visible focus on {now}"
        return now

    def tab_to(self, selector: str, back: bool = False, limit: int = 80) -> dict[str, Any]:
        for _ in range(limit):
            now = self.tab(back)
            if self.page.evaluate("(s) => document.activeElement.matches(s)", selector):
                return now
        raise AssertionError(f"Tab never reached {selector}; last: {self.focused()}")


def test_a_whole_flow_by_keyboard_alone(stack: Stack, page: Page) -> None:
    stack.wait_status(stack.post("Hello from older", sessionKey="older")["runId"], {"completed"})
    api(stack, "PUT", "/policies", {"requireApproval": {"tools": ["write_file"]}})
    open_workbench(page, stack)
    keys = Keyboard(page)

    # the first Tab reaches the skip link; Enter on it puts the focus in the message box
    first = keys.tab()
    assert first["cls"] == "skip-link", first
    page.keyboard.press("Enter")
    assert keys.focused()["id"] == "message"
    assert page.evaluate("location.hash") == ""  # the skip link leaves the URL alone
    page.keyboard.type('/tool write_file {"path": "kb.md", "content": "typed"}')
    page.keyboard.press("Enter")  # Enter sends

    # the approval dialog takes the focus and keeps it: Tab cycles inside it
    modal = page.get_by_role("dialog", name="Approve write_file?")
    expect(modal).to_be_visible(timeout=20_000)
    assert keys.focused()["inDialog"], keys.focused()
    seen = set()
    for _ in range(14):
        now = keys.tab()
        assert now["inDialog"], f"the focus left the dialog: {now}"
        seen.add(now["text"])
    assert {"Approve", "Deny"} <= seen, seen
    for _ in range(3):
        assert keys.tab(back=True)["inDialog"]
    keys.tab_to("dialog[open] button.approve")
    page.keyboard.press("Enter")
    expect(modal).to_be_hidden()
    run_end(page)

    # back to the tool card: its details open with Enter, then close with Space
    card = page.locator("#messages .tool-card")
    expect(card).to_have_class("tool-card completed")
    keys.tab_to("#messages .tool-card summary", back=True)
    details = card.locator("details:has(> summary:focus)")
    expect(details).to_have_count(1)
    page.keyboard.press("Enter")
    expect(details).to_have_attribute("open", "")
    page.keyboard.press("Space")
    expect(details).not_to_have_attribute("open", "")

    # the side panels: arrow keys move between the tabs
    keys.tab_to("[role=tab][aria-selected=true]", back=True)
    assert keys.focused()["id"] == "tab-sessions"
    page.keyboard.press("ArrowRight")
    assert keys.focused()["id"] == "tab-memory"
    expect(page.get_by_role("tab", name="Memory")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#memory-panel")).to_be_visible()
    expect(page.locator("#sessions-panel")).to_be_hidden()
    page.keyboard.press("End")
    assert keys.focused()["id"] == "tab-agent"
    expect(page.locator("#agent-panel")).to_be_visible()
    page.keyboard.press("Home")
    assert keys.focused()["id"] == "tab-sessions"
    assert keys.focused()["outline"]

    # a session from the list opens with Enter
    keys.tab_to('.session-row[data-session-key="older"]')
    page.keyboard.press("Enter")
    expect(page.locator("#messages .msg.user")).to_have_text("Hello from older")
    row = page.locator('.session-row[data-session-key="older"]')
    expect(row).to_have_attribute("aria-current", "true")
    assert page.evaluate("location.hash") == "#session=older"


def test_live_regions_announce_whole_answers_and_status_changes(stack: Stack, page: Page) -> None:
    # record, as they happen, the conversation's changes and what the status line announces
    page.add_init_script(
        """window.__seen = {answer: [], announced: []};
        addEventListener('DOMContentLoaded', () => {
          new MutationObserver(() => {
            const li = document.querySelector('#messages .msg.assistant');
            if (li) window.__seen.answer.push({busy: li.getAttribute('aria-busy'),
                                               text: li.textContent});
          }).observe(document.getElementById('messages'),
                     {subtree: true, childList: true, characterData: true});
          const line = document.getElementById('run-announce');
          new MutationObserver(() => window.__seen.announced.push(line.textContent))
            .observe(line, {childList: true, characterData: true, subtree: true});
        });"""
    )
    open_workbench(page, stack)
    messages = page.locator("#messages")
    expect(messages).to_have_attribute("aria-live", "polite")
    expect(messages).to_have_attribute("aria-relevant", "additions")
    status = page.locator("#run-status")
    assert status.get_attribute("aria-live") is None and status.get_attribute("role") is None
    expect(page.locator("#run-announce")).to_have_attribute("role", "status")

    page.get_by_role("textbox", name="Message").fill("/think hmm\nHello *there*")
    page.get_by_role("button", name="Send").click()
    run_end(page)
    answer = messages.locator(".msg.assistant")
    expect(answer.locator("em")).to_have_text("there")
    assert answer.get_attribute("aria-busy") is None
    assert messages.locator(".msg.thinking").get_attribute("aria-busy") is None
    seen = page.evaluate("window.__seen")
    final = answer.text_content()
    for record in seen["answer"]:
        if record["text"] != final:  # shown while streaming: busy
            assert record["busy"] == "true", seen["answer"]
    # the status line spoke once per status, never the state or the token counts
    announced = [text for text in seen["announced"] if text]
    assert announced == ["Run queued", "Run running", "Run completed"], announced
    expect(page.locator("#run-announce")).to_have_text("Run completed")

    # deterministically: a turn is busy from its first delta until its whole message
    busy = page.evaluate(
        """() => {
          const chat = window.workbench.chat, run = {tools: new Map()}, seen = [];
          const last = () => document.querySelector('#messages .msg.assistant:last-of-type');
          chat.onEvent(run, {type: 'assistant.delta', runId: 'r-x', seq: 1, text: 'Hel'});
          seen.push([last().getAttribute('aria-busy'), last().textContent]);
          chat.onEvent(run, {type: 'assistant.delta', runId: 'r-x', seq: 2, text: 'lo **x**'});
          seen.push([last().getAttribute('aria-busy'), last().textContent]);
          chat.onEvent(run, {type: 'assistant.message', runId: 'r-x', seq: 3,
                             text: 'Hello **x**'});
          seen.push([last().getAttribute('aria-busy'), last().textContent]);
          return seen;
        }"""
    )
    assert busy == [["true", "Hel"], ["true", "Hello **x**"], [None, "Hello x"]], busy


def test_at_phone_width_everything_fits_and_is_in_reach(stack: Stack, page: Page) -> None:
    write = json.dumps({"path": "list.md", "content": "# Shopping\n\n- milk\n- tea"})
    for text in (f"/tool write_file {write}", "What is on the **list**?"):
        stack.wait_status(stack.post(text, sessionKey="phone")["runId"], {"completed"})
    wide = json.dumps({"path": "wide.md", "content": "A long word " + "x" * 200})
    run = stack.post(f"/tool write_file {wide}", sessionKey="wide")
    stack.wait_status(run["runId"], {"completed"})
    api(stack, "POST", "/memory", {"content": "A fact with a long word " + "y" * 120})
    page.set_viewport_size(PHONE)
    open_workbench(page, stack, "#session=phone")
    expect(page.locator("#messages .tool-card")).to_have_count(1)
    nav = page.get_by_role("navigation", name="Jump to")
    expect(nav).to_be_visible()
    save_screenshot(page, "workbench-phone.png")

    def fits() -> None:
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], width

    fits()
    # each button of the bar brings its part into view, focused; the bar stays on screen
    for label, target in [
        ("Sessions", "#tab-sessions"),
        ("Memory", "#tab-memory"),
        ("Agent", "#tab-agent"),
        ("Run", ".runpanel h2"),
        ("Chat", "#message"),
    ]:
        nav.get_by_role("button", name=label).click()
        expect(page.locator(target)).to_be_focused()
        expect(page.locator(target)).to_be_in_viewport()
        expect(nav).to_be_in_viewport()
        fits()
        if label in ("Sessions", "Memory", "Agent"):
            expect(page.get_by_role("tab", name=label)).to_have_attribute("aria-selected", "true")
            panel = page.locator(f"#{label.lower()}-panel")
            expect(panel).to_be_visible()
            panel.scroll_into_view_if_needed()
            fits()
            if label == "Memory":
                expect(panel.locator(".memory-entry")).to_have_count(1)
                save_screenshot(page, "workbench-phone-memory.png")
    # a session with a long unbroken word wraps it
    nav.get_by_role("button", name="Sessions").click()
    page.locator('.session-row[data-session-key="wide"]').click()
    expect(page.locator("#messages .tool-card")).to_have_count(1)
    page.locator("#messages .tool-card summary").first.click()
    fits()
    nav.get_by_role("button", name="Chat").click()

    # the composer and Send are on screen once in the chat, and a message goes out from there
    expect(page.get_by_role("button", name="Send")).to_be_in_viewport()
    page.keyboard.type("From the phone")
    page.get_by_role("button", name="Send").click()
    run_end(page)
    expect(page.locator("#messages .msg.assistant").last).to_have_text("You said: From the phone")
    fits()

    # at desktop width the bar is gone: everything is on screen at once
    page.set_viewport_size(DESKTOP)
    expect(nav).to_be_hidden()
