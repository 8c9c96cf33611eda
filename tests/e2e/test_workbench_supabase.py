"""The workbench signs in with Supabase Auth, in real Chromium, through the vendored
`@supabase/supabase-js` against a local GoTrue (tests/fakes/gotrue.py): the API runs with
SUPABASE_URL pointing at it (and verifies the ES256 access tokens with its JWKS) and
SUPABASE_ANON_KEY set. Email + password signs in (a wrong password shows GoTrue's error), a
message completes with the session's token, sign-out signs out of Supabase; a magic link signs in
when followed; a token refreshed by supabase-js becomes the page's bearer token."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlencode

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.e2e.browser_support import CuttableProxy, chromium_context, save_screenshot
from tests.e2e.conftest import Stack
from tests.fakes.gotrue import GoTrueServer, User

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

ANON_KEY = "anon-key-of-the-test-project"
ALICE = User("alice@example.com", "correct horse battery staple")


@pytest.fixture
def gotrue() -> Iterator[GoTrueServer]:
    with GoTrueServer([ALICE], expires_in=3600) as server:
        yield server


@pytest.fixture
def stack_env(gotrue: GoTrueServer) -> dict[str, str]:
    return {"SUPABASE_URL": gotrue.url, "SUPABASE_ANON_KEY": ANON_KEY}


def console_of(page: Page) -> list[str]:
    lines: list[str] = []
    page.on("console", lambda m: lines.append(f"{m.type}: {m.text}"))
    return lines


def send_and_complete(page: Page, text: str, count: int = 1) -> None:
    page.get_by_role("textbox", name="Message").fill(text)
    page.get_by_role("button", name="Send").click()
    expect(page.locator("[data-run-end='run.completed']")).to_have_count(count, timeout=30_000)
    expect(page.locator(".msg.assistant").last).to_contain_text(f"You said: {text}")


def test_password_sign_in_a_message_and_sign_out(stack: Stack, gotrue: GoTrueServer) -> None:
    config = httpx.get(f"{stack.base_url}/workbench/config.json", timeout=10).json()
    assert config == {"auth": "supabase", "supabaseUrl": gotrue.url, "supabaseAnonKey": ANON_KEY}
    r = httpx.post(
        f"{stack.base_url}/workbench/dev-token", headers={"Sec-Fetch-Site": "same-origin"}
    )
    assert r.status_code == 404

    with chromium_context() as browser:
        page = browser.new_page()
        page.set_viewport_size({"width": 1280, "height": 800})
        console = console_of(page)
        page.goto(f"{stack.base_url}/")
        card = page.get_by_role("dialog", name="Sign in")
        expect(card).to_be_visible()
        expect(page.locator("body[data-ready=true]")).to_have_count(0)
        card.get_by_label("Email").fill(ALICE.email)
        expect(card.get_by_label("Email")).to_be_focused()
        save_screenshot(page, "workbench-sign-in.png")

        card.get_by_label("Password").fill("wrong password")
        card.get_by_role("button", name="Sign in").click()
        expect(card.get_by_role("alert")).to_have_text("Sign-in failed: Invalid login credentials")
        assert not gotrue.issued
        expect(page.locator("body[data-ready=true]")).to_have_count(0)

        card.get_by_label("Password").fill(ALICE.password)
        card.get_by_role("button", name="Sign in").click()
        expect(page.locator("body[data-ready=true]")).to_be_attached()
        expect(card).to_have_count(0)
        expect(page.locator("#signin")).to_contain_text(f"signed in as {ALICE.email}")
        send_and_complete(page, "hello from supabase")

        # the API saw the Supabase user: the session belongs to sub, and the anon key went along
        headers = {"Authorization": f"Bearer {gotrue.issued[-1]}"}
        sessions = httpx.get(
            f"{stack.base_url}/api/agent-runtime/sessions", headers=headers, timeout=10
        ).json()["sessions"]
        assert len(sessions) == 1
        from_page = [r for r in gotrue.requests if "jwks" not in r.path]  # not the API's fetch
        assert from_page and {r.apikey for r in from_page} == {ANON_KEY}

        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_role("dialog", name="Sign in")).to_be_visible()
        assert len(gotrue.seen("POST", "/logout")) == 1
        stored = page.evaluate("Object.keys(localStorage).filter(k => k.startsWith('sb-'))")
        assert stored == []
        # signed out, a poll still scheduled (a run's status, the approvals) sends nothing: it
        # once went out without a token and the API answered 401
        sent: list[str] = []
        page.on("request", lambda r: sent.append(r.url) if "/api/agent-runtime" in r.url else None)
        code = page.evaluate(
            """async () => {
              const api = await import("/workbench/api.js");
              try { await api.call("GET", "/sessions"); return "sent"; }
              catch (err) { return err.code; }
            }"""
        )
        assert (code, sent) == ("signed_out", [])
    # a wrong password is a 400 the browser logs as a failed load: that one only
    errors = [line for line in console if line.startswith("error")]
    assert all("status of 400" in line for line in errors), console


def test_magic_link_and_token_refresh(stack: Stack, gotrue: GoTrueServer) -> None:
    # the page through a recording proxy: the test sees the bearer token of each API call
    proxy = CuttableProxy(int(stack.base_url.rsplit(":", 1)[1]))
    try:
        with chromium_context() as browser:
            page = browser.new_page()
            console = console_of(page)
            page.goto(f"{proxy.url}/")
            card = page.get_by_role("dialog", name="Sign in")
            card.get_by_label("Email").fill(ALICE.email)
            card.get_by_role("button", name="Email me a sign-in link").click()
            expect(card.get_by_role("status")).to_have_text(
                f"Check {ALICE.email} for a sign-in link."
            )
            (otp,) = gotrue.seen("POST", "/otp")
            assert otp.body["email"] == ALICE.email and otp.body["create_user"] is False

            # following the link: GoTrue redirects to the page with the session in the fragment
            # (a session that expires within supabase-js's refresh margin of 90 s)
            gotrue.expires_in = 60
            session = gotrue.session(ALICE)
            gotrue.expires_in = 3600
            fragment = urlencode(
                {
                    "access_token": session["access_token"],
                    "refresh_token": session["refresh_token"],
                    "expires_in": session["expires_in"],
                    "expires_at": session["expires_at"],
                    "token_type": "bearer",
                    "type": "magiclink",
                }
            )
            page.goto("about:blank")  # (only the fragment differs: a new load, not a jump)
            page.goto(f"{proxy.url}/#{fragment}")
            expect(page.locator("body[data-ready=true]")).to_be_attached()
            expect(page.locator("#signin")).to_contain_text(f"signed in as {ALICE.email}")
            assert "access_token" not in page.url  # supabase-js cleared the fragment

            # a reload finds the stored session about to expire: supabase-js refreshes it, and
            # the page calls the API with the new token
            page.reload()
            expect(page.locator("body[data-ready=true]")).to_be_attached()
            deadline = time.monotonic() + 10
            while not gotrue.seen("POST", "/token"):
                assert time.monotonic() < deadline, gotrue.requests
                time.sleep(0.1)
            refreshed = gotrue.issued[1:]
            assert refreshed, "supabase-js refreshed the session"
            send_and_complete(page, "after a refresh")
            posts = [
                r
                for r in proxy.requests()
                if r.method == "POST" and r.target == "/api/agent-runtime"
            ]
            assert len(posts) == 1
            assert posts[0].headers["authorization"] in {f"Bearer {t}" for t in refreshed}
        assert not [line for line in console if line.startswith("error")], console
    finally:
        proxy.close()
