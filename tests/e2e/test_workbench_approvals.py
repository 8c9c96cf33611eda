"""The workbench's approvals, tool cards, plan panel, cancel and compaction marker, in real
Chromium against the real API and workers: a gated tool call opens the approval dialog in every
open tab of the user and closes everywhere once decided; approving runs it (a sandboxed command
whose output and files show on its card); denying, queueing, "decided elsewhere"; a plan run's
steps and progress; cancel; a compaction marker in the conversation; an approval the user may
not decide (its rule forbids self-approval) says so."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.e2e.browser_support import chromium_context, save_screenshot
from tests.e2e.conftest import Stack, stack_per_user
from tests.e2e.workbench_support import api, open_workbench, signed_in_page

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# one API + workers for the module; each test is a user (and tenant) of its own
stack = pytest.fixture(stack_per_user)

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
COMMAND = "echo hi; echo oops >&2; printf data > out.txt"


class Tabs:
    """Pages of one browser signed in as the test's user; collects every console line."""

    def __init__(self, browser: Any, stack: Stack) -> None:
        self.browser = browser
        self.stack = stack
        self.console: list[str] = []

    def open(self) -> Page:
        page = signed_in_page(self.browser, self.stack, self.console)
        open_workbench(page, self.stack)
        return page

    def errors(self, *allowed: str) -> list[str]:
        return [
            line
            for line in self.console
            if line.startswith("error") and not any(a in line for a in allowed)
        ]


@pytest.fixture
def tabs(stack: Stack) -> Iterator[Tabs]:
    with chromium_context() as browser:
        yield Tabs(browser, stack)


def send(page: Page, text: str) -> None:
    page.get_by_role("textbox", name="Message").fill(text)
    page.get_by_role("button", name="Send").click()


def dialog(page: Page, tool: str) -> Locator:
    return page.get_by_role("dialog", name=f"Approve {tool}?")


def wait_run_end(page: Page, stack: Stack, kind: str = "run.completed", count: int = 1) -> None:
    try:
        expect(page.locator(f"[data-run-end='{kind}']")).to_have_count(count, timeout=40_000)
    except AssertionError:
        raise AssertionError(f"no {kind} shown\nlogs:\n{stack.logs()}") from None


def test_a_gated_call_asks_every_tab_and_approving_runs_it(stack: Stack, tabs: Tabs) -> None:
    api(stack, "PUT", "/policies", {"requireApproval": {"risk": ["high"]}})
    one, two = tabs.open(), tabs.open()  # two shows no session at all
    send(one, f"/tool run_shell {json.dumps({'command': COMMAND})}")

    for page in (one, two):
        modal = dialog(page, "run_shell")
        expect(modal).to_be_visible(timeout=20_000)
        expect(modal.locator(".approval-program")).to_have_text(COMMAND)
        expect(modal.locator(".risk")).to_have_text("high")
        expect(modal).to_contain_text("high-risk tool")
        expect(modal.locator(".approval-expiry")).to_contain_text(re.compile(r"\d+:\d\d left"))
    # the focus is in the dialog; Escape decides nothing: the approval waits in a banner
    assert one.evaluate("document.activeElement.closest('dialog.approval') !== null")
    one.keyboard.press("Escape")
    expect(dialog(one, "run_shell")).to_be_hidden()
    banner = one.get_by_role("region", name="Pending approvals")
    expect(banner).to_contain_text("1 tool call waiting for approval")
    [pending] = api(stack, "GET", "/approvals", params={"status": "pending"})["approvals"]
    banner.get_by_role("button", name="Review").click()
    modal = dialog(one, "run_shell")
    expect(modal).to_be_visible()
    expect(modal.locator(".approval-session")).to_have_text(re.compile(r"\S+"))
    SHOTS.mkdir(parents=True, exist_ok=True)
    save_screenshot(one, "workbench-approval.png")

    # at phone width the dialog fits the screen, its buttons within reach
    two.set_viewport_size({"width": 390, "height": 844})
    box = dialog(two, "run_shell").bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
    expect(dialog(two, "run_shell").get_by_role("button", name="Approve")).to_be_in_viewport()

    modal.get_by_label("If approved, also trust this tool").select_option("300")
    modal.get_by_role("button", name="Approve").click()
    expect(modal).to_be_hidden()
    # the other tab closes its dialog too, and says why
    expect(dialog(two, "run_shell")).to_be_hidden(timeout=10_000)
    expect(two.locator(".approval-note")).to_contain_text(f"approved by {stack.user}")

    wait_run_end(one, stack)
    card = one.locator(".tool-card").last
    expect(card).to_have_class(re.compile(r"\bcompleted\b"))
    expect(card.locator(".tool-program")).to_have_text(COMMAND)
    expect(card.locator(".tool-exit")).to_contain_text("exit code 0")
    expect(card.locator(".tool-stdout pre")).to_have_text("hi")
    expect(card.locator(".tool-stderr pre")).to_have_text("oops")
    download = card.get_by_role("button", name="Download out.txt")
    with one.expect_download() as got:
        download.click()
    assert got.value.suggested_filename == "out.txt"
    assert Path(got.value.path()).read_text() == "data"
    card.scroll_into_view_if_needed()
    save_screenshot(one, "workbench-tool-card.png", full_page=True)

    decided = api(stack, "GET", f"/approvals/{pending['approvalId']}")
    assert decided["status"] == "approved" and decided["decidedBy"] == stack.user
    assert decided["trustSeconds"] == 300
    assert not tabs.errors(), tabs.console


def test_approvals_queue_up_deny_anywhere_and_decided_elsewhere(stack: Stack, tabs: Tabs) -> None:
    api(stack, "PUT", "/policies", {"requireApproval": {"tools": ["write_file"]}})
    one, two = tabs.open(), tabs.open()
    send(one, '/tool write_file {"path": "a.txt", "content": "x"}')
    expect(dialog(one, "write_file")).to_be_visible(timeout=20_000)
    expect(dialog(two, "write_file")).to_be_visible(timeout=10_000)
    # a second approval, of a session neither tab shows: queued behind the first
    other = stack.post('/tool write_file {"path": "b.txt", "content": "y"}')
    for page in (one, two):
        modal = dialog(page, "write_file")
        expect(modal.locator(".approval-position")).to_have_text(
            "1 of 2 pending approvals", timeout=10_000
        )
        expect(modal.locator(".approval-args")).to_contain_text('"a.txt"')

    # the second tab denies the first, with a reason: both tabs move on to the second
    modal = dialog(two, "write_file")
    modal.get_by_label("Reason (optional").fill("not in this folder")
    modal.get_by_role("button", name="Deny").click()
    for page in (one, two):
        modal = dialog(page, "write_file")
        expect(modal.locator(".approval-args")).to_contain_text('"b.txt"', timeout=10_000)
        expect(modal.locator(".approval-position")).to_have_text("")
    expect(one.locator(".approval-note")).to_contain_text(f"denied by {stack.user}")
    wait_run_end(one, stack)
    expect(one.locator(".tool-card").last).to_have_class(re.compile(r"\bfailed\b"))

    # the first tab approves the second: it closes in both
    dialog(one, "write_file").get_by_role("button", name="Approve").click()
    for page in (one, two):
        expect(dialog(page, "write_file")).to_be_hidden(timeout=10_000)
    assert stack.wait_status(other["runId"], {"completed"})["status"] == "completed"

    found = api(stack, "GET", "/approvals")["approvals"]
    outcome = {a["args"]["path"]: (a["status"], a["decisionReason"]) for a in found}
    assert outcome == {"a.txt": ("denied", "not in this folder"), "b.txt": ("approved", None)}

    # deciding one that was decided meanwhile (a 409: as if the poll had not caught up yet)
    stale = next(a for a in found if a["args"]["path"] == "b.txt")
    two.evaluate(
        "(a) => window.workbench.approvals.add(a, Infinity)",
        {**stale, "status": "pending", "canDecide": True},  # as a stale poll listed it
    )
    modal = dialog(two, "write_file")
    expect(modal).to_be_visible()
    modal.get_by_role("button", name="Approve").click()
    expect(modal).to_be_hidden()
    expect(two.locator(".approval-note").last).to_contain_text("decided elsewhere")
    assert not tabs.errors("status of 409"), tabs.console


def test_an_approval_its_rule_keeps_from_the_runs_user_says_why(stack: Stack, tabs: Tabs) -> None:
    api(
        stack,
        "PUT",
        "/policies",
        {"requireApproval": {"tools": ["write_file"], "allowSelfApproval": False}},
    )
    page = tabs.open()
    send(page, '/tool write_file {"path": "a.txt", "content": "x"}')
    modal = dialog(page, "write_file")
    expect(modal).to_be_visible(timeout=20_000)
    expect(modal.locator(".approval-error")).to_contain_text(
        "The run's own user may not decide this approval"
    )
    expect(modal.get_by_role("button", name="Approve")).to_be_disabled()
    expect(modal.get_by_role("button", name="Deny")).to_be_disabled()
    save_screenshot(page, "workbench-approval-not-yours.png")
    modal.get_by_role("button", name="Later").click()  # never a decision
    expect(modal).to_be_hidden()
    [pending] = api(stack, "GET", "/approvals")["approvals"]
    assert pending["status"] == "pending" and pending["canDecide"] is False


def test_a_plan_run_shows_its_steps_revision_and_progress(stack: Stack, tabs: Tabs) -> None:
    agent = api(stack, "POST", "/agents", {"name": "planner", "mode": "plan"})
    page = tabs.open()
    # no agent picker on this branch: choose the agent as the picker would
    page.evaluate("(id) => { window.workbench.chat.agentId = id; }", agent["id"])
    missing = json.dumps({"path": "missing.txt"})
    write = json.dumps({"path": "plan.md", "content": "# done"})
    send(
        page,
        f"/plan read it /tool read_file {missing}; never reached\n"
        f"/replan explain /tool write_file {write}; finish",
    )
    wait_run_end(page, stack)

    plan = page.locator("#plan")
    expect(plan).to_be_visible()
    progress = plan.get_by_role("progressbar", name="2 of 2 steps done")
    expect(progress).to_have_attribute("value", "2")
    expect(progress).to_have_attribute("max", "2")
    steps = plan.locator(".plan-steps").first.locator("li")
    expect(steps).to_have_count(4)
    assert [steps.nth(i).get_attribute("data-status") for i in range(4)] == [
        "failed",
        "skipped",
        "done",
        "done",
    ]
    expect(plan.get_by_role("heading", name="Plan (revision 1)")).to_be_visible()
    expect(plan.locator(".plan-revised")).to_contain_text("step 1 failed: read_file")
    earlier = plan.locator("details.plan-earlier")
    expect(earlier.locator("summary")).to_have_text("Earlier revisions (1)")
    earlier.locator("summary").click()
    expect(earlier.locator("li")).to_have_count(2)  # the first plan: read it, never reached
    save_screenshot(page, "workbench-plan.png", full_page=True)

    # a file a tool wrote downloads from the card
    card = page.locator(".tool-card", has_text="write_file")
    with page.expect_download() as got:
        card.get_by_role("button", name="Download plan.md").click()
    assert Path(got.value.path()).read_text() == "# done"

    # a new session has no plan yet
    page.get_by_role("button", name="New session").click()
    expect(plan).to_be_hidden()
    # a rejected plan shows, and the one asked for again runs
    send(page, "/plan-invalid-once\n/plan only step")
    wait_run_end(page, stack, count=1)
    expect(plan.locator(".plan-invalid")).to_have_text(
        re.compile(r"^Plan rejected \(attempt 1\): ")
    )
    expect(plan.get_by_role("progressbar", name="1 of 1 steps done")).to_be_visible()
    assert not tabs.errors(), tabs.console


def test_cancel_stops_a_running_run(stack: Stack, tabs: Tabs) -> None:
    page = tabs.open()
    send(page, "/sleep 20000")
    status = page.locator("#run-status")
    expect(status).to_contain_text("run: running", timeout=20_000)
    cancel = page.get_by_role("button", name="Cancel run")
    expect(cancel).to_be_enabled()
    cancel.click()
    wait_run_end(page, stack, "run.cancelled")
    expect(status).to_contain_text("run: cancelled")
    expect(page.locator("[data-run-end='run.cancelled']")).to_contain_text("cancelled")
    expect(cancel).to_be_disabled()
    run_id = page.evaluate("window.workbench.chat.currentRunId")
    assert stack.status(run_id)["status"] == "cancelled"

    # a run waiting for approval: put the dialog aside, cancel the run; the approval goes too
    api(stack, "PUT", "/policies", {"requireApproval": {"tools": ["write_file"]}})
    send(page, '/tool write_file {"path": "a.txt", "content": "x"}')
    modal = dialog(page, "write_file")
    expect(modal).to_be_visible(timeout=20_000)
    expect(page.locator(".tool-card.waiting .tool-state")).to_have_text("waiting for approval…")
    modal.get_by_role("button", name="Later").click()
    expect(cancel).to_be_enabled()
    cancel.click()
    wait_run_end(page, stack, "run.cancelled", count=2)
    expect(page.get_by_role("region", name="Pending approvals")).to_be_hidden()
    expect(page.locator(".approval-note").last).to_contain_text(
        f"expired (run cancelled by {stack.user})"
    )
    card = page.locator(".tool-card").last
    expect(card).to_have_class(re.compile(r"\bfailed\b"))
    expect(card.locator(".tool-state")).to_have_text(re.compile(r"not finished: run cancelled"))
    assert not tabs.errors(), tabs.console


def test_a_compaction_shows_where_it_happened(stack: Stack, tabs: Tabs) -> None:
    agent = api(stack, "POST", "/agents", {"name": "small", "contextWindow": 6000})
    page = tabs.open()
    page.evaluate("(id) => { window.workbench.chat.agentId = id; }", agent["id"])
    filler = "lorem ipsum dolor sit amet " * 60
    for i in range(1, 7):
        send(page, f"turn {i} {filler}")
        wait_run_end(page, stack, count=i)
        if page.locator(".msg.compaction").count():
            break
    marker = page.locator(".msg.compaction").first
    expect(marker).to_have_text(
        re.compile(r"Context compacted: \d+ messages summarised, [\d,]+ → [\d,]+ tokens")
    )
    status = page.locator("#run-status")
    expect(status).to_contain_text("compactions: 1")
    expect(status.locator("meter")).to_have_attribute("max", "6000")
    expect(status).to_contain_text(re.compile(r"[\d,]+ / 6,000 tokens \(\d+%\)"))
    assert not tabs.errors(), tabs.console
