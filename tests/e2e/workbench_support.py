"""Helpers of the workbench's browser tests: the API as the test's user, and signed-in pages."""

from __future__ import annotations

import json
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from tests.e2e.conftest import Stack

DESKTOP = {"width": 1280, "height": 900}


def api(
    stack: Stack,
    method: str,
    path: str,
    body: Any = None,
    *,
    user: str | None = None,
    params: dict[str, Any] | None = None,
) -> Any:
    """Call `/api/agent-runtime{path}` as `user` (default: the stack's); must succeed."""
    r = httpx.request(
        method,
        f"{stack.base_url}/api/agent-runtime{path}",
        json=body,
        params=params,
        headers=stack.headers(user),
        timeout=10,
    )
    assert r.status_code < 300, r.text
    return r.json() if r.content else None


def signed_in_page(
    browser: Any, stack: Stack, console: list[str], size: dict[str, int] = DESKTOP
) -> Page:
    """A new page of `browser` that signs in as the stack's user when it loads the workbench (the
    token is put where a pasted one goes); its console lines are appended to `console`."""
    page: Page = browser.new_page()
    page.set_viewport_size(size)
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    token = json.dumps(stack.token())
    page.add_init_script(f"sessionStorage.setItem('agent-runtime.token', {token});")
    return page


def open_workbench(page: Page, stack: Stack, fragment: str = "") -> None:
    """Load the workbench (at `/#fragment` when given) and wait until it is mounted."""
    page.goto(f"{stack.base_url}/{fragment}")
    expect(page.locator("body[data-ready=true]")).to_be_attached()
