"""The workbench's memory panel and agent panel, in real Chromium: memories stored through the API
are listed with importance and access counts, found by a search, and one is forgotten (gone from
the page and from the API); picking an agent shows its settings and its tools with the policy's
reasons; the "New agent" form creates a plan-mode agent that new sessions then use."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from tests.e2e.browser_support import chromium_context, save_screenshot
from tests.e2e.conftest import Stack, stack_per_user
from tests.e2e.workbench_support import api, open_workbench, signed_in_page

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

# one API + workers for the module; each test is a user (and tenant) of its own
stack = pytest.fixture(stack_per_user)

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def remember(stack: Stack, content: str, **body: Any) -> str:
    created = api(stack, "POST", "/memory", {"content": content, **body})
    return str(created["entries"][0]["id"])


@dataclass
class Workbench:
    """A signed-in page, its console lines, and the HTTP statuses the test expects the browser
    to log as failed loads (a refused request the page handles)."""

    page: Page
    console: list[str] = field(default_factory=list)
    expected_statuses: set[int] = field(default_factory=set)

    def errors(self) -> list[str]:
        refused = re.compile(r"status of (\d+)")
        return [
            line
            for line in self.console
            if line.startswith("error")
            and not ((m := refused.search(line)) and int(m.group(1)) in self.expected_statuses)
        ]


@pytest.fixture
def wb(stack: Stack) -> Iterator[Workbench]:
    """The workbench signed in as the test's user at 1280 px; no unexpected console error at the end."""
    with chromium_context() as browser:
        console: list[str] = []
        bench = Workbench(signed_in_page(browser, stack, console), console)
        page = bench.page
        vendored: list[str] = []
        page.on("request", lambda r: vendored.append(r.url) if "/vendor/" in r.url else None)
        open_workbench(page, stack)
        yield bench
        assert not bench.errors(), bench.console
        assert vendored == [], "only Supabase sign-in loads the vendored supabase-js"


def test_memory_search_counts_and_forget(stack: Stack, wb: Workbench) -> None:
    deploys = remember(stack, "Deploys run from `main` via CI.", tags=["ops"], importance=0.9)
    pluto = remember(
        stack, "The staging database is called pluto.", tags=["ops", "db"], importance=0.3
    )
    remember(stack, "Alice prefers tea over coffee.", importance=0.5)
    for _ in range(2):
        api(stack, "GET", f"/memory/{deploys}")  # each read counts as an access
    # another tenant's memory never shows
    other = api(stack, "POST", "/memory", {"content": "mallory's secret"}, user="mallory")
    assert other["entries"]

    p = wb.page
    p.get_by_role("tab", name="Memory").click()
    panel = p.locator("#memory-panel")
    panel.get_by_role("button", name="Refresh").click()  # the panel loaded before the writes
    entries = panel.locator(".memory-entry")
    expect(entries).to_have_count(3)
    expect(panel).not_to_contain_text("mallory")
    first = entries.filter(has_text="Deploys run from")
    expect(first.locator(".memory-importance dd")).to_have_text("0.90")
    expect(first.locator(".memory-access dd")).to_have_text("2×")
    expect(first.locator(".memory-tags .tag")).to_have_text(["ops"])
    expect(entries.filter(has_text="pluto").locator(".memory-importance dd")).to_have_text("0.30")

    panel.get_by_role("searchbox", name="Search memory").fill("staging database pluto")
    panel.get_by_role("button", name="Search").click()
    expect(panel.locator(".memory-status")).to_contain_text("result")
    expect(entries.first).to_contain_text("The staging database is called pluto.")
    expect(entries.first.locator(".memory-score")).to_be_visible()
    SHOTS.mkdir(parents=True, exist_ok=True)
    save_screenshot(p, "workbench-memory.png")

    # forget it: a confirmation first (Cancel keeps it), then gone from the page and the API
    target = entries.filter(has_text="pluto")
    target.get_by_role("button", name="Forget").click()
    dialog = p.get_by_role("dialog", name="Forget this memory?")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    expect(target).to_have_count(1)
    target.get_by_role("button", name="Forget").click()
    dialog.get_by_role("button", name="Forget").click()
    expect(target).to_have_count(0)
    expect(panel.locator(".memory-status")).to_have_text("Forgotten.")
    r = httpx.get(
        f"{stack.base_url}/api/agent-runtime/memory/{pluto}", headers=stack.headers(), timeout=10
    )
    assert r.status_code == 404
    panel.get_by_role("button", name="Show all").click()
    expect(entries).to_have_count(2)
    expect(panel).not_to_contain_text("pluto")


def test_memory_pages_with_load_more(stack: Stack, wb: Workbench) -> None:
    for i in range(23):
        remember(stack, f"Fact number {i}.")
    p = wb.page
    p.get_by_role("tab", name="Memory").click()
    panel = p.locator("#memory-panel")
    panel.get_by_role("button", name="Refresh").click()
    entries = panel.locator(".memory-entry")
    expect(entries).to_have_count(20)
    expect(entries.first).to_contain_text("Fact number 22.")  # newest first
    panel.get_by_role("button", name="Load more").click()
    expect(entries).to_have_count(23)
    expect(entries.last).to_contain_text("Fact number 0.")
    expect(panel.get_by_role("button", name="Load more")).to_be_hidden()
    expect(panel.locator(".memory-status")).to_have_text("23 entries")


def test_memory_panel_empty_and_error_states(wb: Workbench) -> None:
    p = wb.page
    p.get_by_role("tab", name="Memory").click()
    panel = p.locator("#memory-panel")
    expect(panel.locator(".memory-status")).to_contain_text("No memories yet")
    panel.get_by_role("searchbox", name="Search memory").fill("anything")
    panel.get_by_role("button", name="Search").click()
    expect(panel.locator(".memory-status")).to_have_text("No memory matches “anything”.")
    # the API refuses the request (here: the token no longer works): an alert, not a crash
    wb.expected_statuses.add(401)
    p.evaluate("async () => (await import('/workbench/api.js')).setToken('not-a-token')")
    panel.get_by_role("button", name="Refresh").click()
    expect(panel.get_by_role("alert")).to_contain_text("Cannot search memory")


def test_agent_picker_tools_and_new_plan_agent(stack: Stack, wb: Workbench) -> None:
    researcher = api(
        stack, "POST", "/agents", {"name": "researcher", "model": "offline", "maxTurns": 4}
    )
    api(
        stack,
        "PUT",
        f"/agents/{researcher['id']}/policy",
        {"deny": ["run_shell"], "requireApproval": {"tools": ["write_file"]}},
    )
    mine = remember(stack, "Researcher notes: sources first.", agentId=researcher["id"])
    remember(stack, "A shared fact.")

    p = wb.page
    # what `/tools` says of a tenant source that is down (the API side is tested in
    # tests/integration/test_mcp_client.py): the panel shows it as it comes
    down = {
        "source": "mcp:docs",
        "tools": "mcp__docs__*",
        "reason": "cannot connect: ConnectError: All connection attempts failed",
    }

    def with_unavailable(route: Route) -> None:
        answer = route.fetch()
        route.fulfill(response=answer, json={**answer.json(), "unavailable": [down]})

    p.route("**/api/agent-runtime/tools*", with_unavailable)
    picker = p.get_by_role("combobox", name="Agent", exact=True)
    p.reload()  # the picker lists agents at load
    expect(p.locator("body[data-ready=true]")).to_be_attached()
    expect(picker.locator("option")).to_have_count(2)
    picker.select_option(label="researcher")

    p.get_by_role("tab", name="Agent").click()
    panel = p.locator("#agent-panel")
    expect(panel.get_by_role("heading", name="researcher")).to_be_visible()
    settings = panel.locator(".agent-settings")
    expect(settings).to_contain_text("offline")
    expect(settings).to_contain_text("max turns4")
    shell = panel.locator(".tool-list.denied [data-tool=run_shell]")
    expect(shell.locator(".tool-policy-reason")).to_contain_text("run_shell")
    expect(shell.locator(".tool-policy-reason")).to_contain_text("agent")
    write = panel.locator(".tool-list.allowed [data-tool=write_file]")
    expect(write.locator(".tool-policy-approval")).to_contain_text("Needs approval")
    expect(write.locator(".tool-policy-approval")).to_contain_text("write_file")
    assert (
        panel.locator(".tool-list.allowed [data-tool=read_file] .tool-policy-approval").count() == 0
    )
    expect(write.locator(".risk")).to_be_visible()
    gone = panel.locator(".tool-list.unavailable [data-source='mcp:docs']")
    expect(gone.locator(".tool-policy-name")).to_have_text("mcp__docs__*")
    expect(gone.locator(".tool-policy-reason")).to_have_text(down["reason"])
    SHOTS.mkdir(parents=True, exist_ok=True)
    save_screenshot(p, "workbench-agent.png", full_page=True)
    p.unroute("**/api/agent-runtime/tools*")

    # the memory panel follows the picked agent: only its entries
    p.get_by_role("tab", name="Memory").click()
    memory = p.locator("#memory-panel .memory-entry")
    expect(memory).to_have_count(1)
    expect(memory.first).to_have_attribute("data-id", mine)

    # a new plan-mode agent from the form: created, picked, and used by a new session
    p.get_by_role("tab", name="Agent").click()
    panel.locator("summary", has_text="New agent").click()
    form = panel.get_by_role("form", name="New agent")
    form.get_by_label("Name", exact=True).fill("planner")
    form.get_by_label("Mode", exact=True).select_option("plan")
    form.get_by_label("System prompt (optional)").fill("Plan carefully.")
    form.get_by_role("button", name="Create agent").click()
    expect(form.get_by_role("status")).to_contain_text("Created “planner”")
    expect(picker.locator("option:checked")).to_have_text("planner · plan")
    expect(panel.get_by_role("heading", name="planner")).to_be_visible()
    expect(settings).to_contain_text("modeplan")
    agents = api(stack, "GET", "/agents")["agents"]
    planner = next(a for a in agents if a["name"] == "planner")
    assert planner["mode"] == "plan" and planner["systemPrompt"] == "Plan carefully."

    p.get_by_role("textbox", name="Message").fill("/plan look around; write it down")
    p.get_by_role("button", name="Send").click()
    expect(p.locator("[data-run-end='run.completed']")).to_be_visible(timeout=30_000)
    sessions = api(stack, "GET", "/sessions")["sessions"]
    assert [s["agentId"] for s in sessions] == [planner["id"]]

    # at phone width the panel fits (nothing wider than the screen)
    p.set_viewport_size({"width": 390, "height": 844})
    panel.scroll_into_view_if_needed()
    assert p.evaluate("document.documentElement.scrollWidth") <= 390
    save_screenshot(p, "workbench-agent-phone.png", full_page=True)
    p.set_viewport_size({"width": 1280, "height": 900})

    # a name already taken: the form says why
    wb.expected_statuses.add(409)
    form.get_by_label("Name", exact=True).fill("researcher")
    form.get_by_role("button", name="Create agent").click()
    expect(form.get_by_role("alert")).to_contain_text("already exists")


def test_the_memory_tab_is_up_to_date_when_opened(stack: Stack, wb: Workbench) -> None:
    p = wb.page
    p.get_by_role("tab", name="Memory").click()
    panel = p.locator("#memory-panel")
    expect(panel.locator(".memory-status")).to_contain_text("No memories yet")
    p.get_by_role("tab", name="Sessions").click()
    remember(stack, "Stored by another client while the tab was hidden.")
    p.get_by_role("tab", name="Memory").click()  # no Refresh needed
    expect(panel).to_contain_text("Stored by another client while the tab was hidden.")
