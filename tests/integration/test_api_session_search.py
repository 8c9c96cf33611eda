"""Sessions API for the workbench: `q` search with the cursor, one session by key, each
session's sub-agent parent (from the spawn rows) and live run, isolated per tenant."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import update

from app.auth.principal import Principal
from app.config import Settings
from app.db.engine import Database
from app.db.models import AgentSession
from app.queue.lease import LeasedRun
from app.tools.base import ToolContext
from app.tools.subagent_tools import SessionsSpawn
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api

pytestmark = pytest.mark.timeout(30)

SESSIONS = "/api/agent-runtime/sessions"


@pytest.fixture
async def api(database: Database, db_url: str) -> AsyncIterator[Api]:
    async with running_api(make_settings(db_url), database) as api:
        yield api


async def listing(api: Api, user: str = "alice", **params: str) -> dict[str, Any]:
    r = await api.client.get(SESSIONS, params=params, headers=auth(user))
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def keys(body: dict[str, Any]) -> list[str]:
    return [s["sessionKey"] for s in body["sessions"]]


async def test_search_matches_key_substring_ignoring_case(api: Api) -> None:
    for key in ["Report-2026", "weekly-report", "chat-1", "REPORTS.old"]:
        await api.post_run("hi", sessionKey=key)
    assert keys(await listing(api, q="report")) == ["REPORTS.old", "weekly-report", "Report-2026"]
    assert keys(await listing(api, q="  RePoRt-2026 ")) == ["Report-2026"]
    assert keys(await listing(api, q="nothing")) == []
    assert len((await listing(api, q=""))["sessions"]) == 4  # empty: no filter


async def test_search_takes_like_wildcards_literally(api: Api) -> None:
    for key in ["a_b", "axb", "a.b", "c"]:
        await api.post_run("hi", sessionKey=key)
    # session keys cannot hold % or \, but a query can: they must not act as wildcards
    assert keys(await listing(api, q="a_b")) == ["a_b"]
    assert keys(await listing(api, q="%")) == []
    assert keys(await listing(api, q="a%b")) == []
    assert keys(await listing(api, q="\\")) == []
    assert keys(await listing(api, q="_")) == ["a_b"]


async def test_search_matches_titles(api: Api, database: Database, alice: Principal) -> None:
    await api.post_run("hi", sessionKey="k1")
    await api.post_run("hi", sessionKey="k2")
    async with database.tenant(alice) as s:
        await s.execute(
            update(AgentSession)
            .where(AgentSession.session_key == "k1")
            .values(title="Quarterly 50% Budget")
        )
    assert keys(await listing(api, q="budget")) == ["k1"]
    assert keys(await listing(api, q="50%")) == ["k1"]
    assert keys(await listing(api, q="5_%")) == []


async def test_search_pages_with_the_cursor(api: Api) -> None:
    wanted = [f"match-{i}" for i in range(5)]
    for i, key in enumerate(wanted):
        await api.post_run("hi", sessionKey=key)
        await api.post_run("hi", sessionKey=f"other-{i}")
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"q": "MATCH", "limit": "2"} | ({"before": cursor} if cursor else {})
        body = await listing(api, **params)
        seen += keys(body)
        pages += 1
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert pages == 3 and seen == wanted[::-1]


@pytest.mark.parametrize(
    "params",
    [{"q": "x" * 201}, {"q": "a\u0000b"}, {"q": "tab\there"}],
)
async def test_bad_search_is_422(api: Api, params: dict[str, str]) -> None:
    r = await api.client.get(SESSIONS, params=params, headers=auth())
    assert r.status_code == 422, r.text
    assert error_of(r)["field"] == "q"


async def test_search_never_shows_another_tenants_sessions(api: Api) -> None:
    await api.post_run("alice's", sessionKey="shared-name")
    await api.post_run("mallory's", user="mallory", sessionKey="mallory-only")
    assert keys(await listing(api, "mallory", q="shared")) == []
    assert keys(await listing(api, "mallory", q="")) == ["mallory-only"]
    assert keys(await listing(api, q="mallory")) == []
    r = await api.client.get(f"{SESSIONS}/shared-name", headers=auth("mallory"))
    assert r.status_code == 404 and error_of(r)["field"] == "sessionKey"


async def test_live_run_is_the_active_one_and_clears_when_it_ends(api: Api) -> None:
    first = await api.post_run("one", sessionKey="busy")
    second = await api.post_run("two", sessionKey="busy", ifBusy="enqueue")
    await api.post_run("idle", sessionKey="idle")

    def live(body: dict[str, Any]) -> dict[str, str | None]:
        return {s["sessionKey"]: s["liveRunId"] for s in body["sessions"]}

    # queued only: the first queued run
    assert live(await listing(api))["busy"] == first["runId"]
    claimed = await api.runtime.queue.claim_next("w", 30)
    assert claimed is not None and str(claimed.id) == first["runId"]
    one = (await api.client.get(f"{SESSIONS}/busy", headers=auth())).json()
    assert one["liveRunId"] == first["runId"] and one["parentSessionKey"] is None
    await LeasedRun(api.runtime.db, claimed, "w").finish("completed", result={"text": "ok"})
    assert live(await listing(api))["busy"] == second["runId"]
    await api.client.post(
        "/api/agent-runtime/cancel", params={"runId": second["runId"]}, headers=auth()
    )
    body = await listing(api)
    assert live(body)["busy"] is None
    # the idle session's run is still queued: it is live too
    assert live(body)["idle"] is not None
    assert (await api.client.get(f"{SESSIONS}/busy", headers=auth())).json()["liveRunId"] is None


async def test_a_spawned_child_names_its_parent(
    api: Api, database: Database, alice: Principal
) -> None:
    run = await api.post_run("boss", sessionKey="boss")
    claimed = await api.runtime.queue.claim_next("w", 30)
    assert claimed is not None and str(claimed.id) == run["runId"]
    ctx = ToolContext(
        db=database,
        principal=alice,
        session_id=claimed.session_id,
        run_id=claimed.id,
        settings=Settings(_env_file=None),  # type: ignore[call-arg]
        tool_call_id="call-1",
    )
    spawned = await SessionsSpawn().run(ctx, {"task": "count", "label": "counter"})
    child_key = spawned["childSessionKey"]
    # a top-level session whose key merely looks like a child's has no parent
    await api.post_run("lookalike", sessionKey="boss:sub:deadbeef")

    body = await listing(api)
    by_key = {s["sessionKey"]: s for s in body["sessions"]}
    assert by_key[child_key]["parentSessionKey"] == "boss"
    assert by_key[child_key]["liveRunId"] == spawned["runId"]
    assert by_key["boss"]["parentSessionKey"] is None
    assert by_key["boss"]["liveRunId"] == run["runId"]
    assert by_key["boss:sub:deadbeef"]["parentSessionKey"] is None
    one = (await api.client.get(f"{SESSIONS}/{child_key}", headers=auth())).json()
    assert one["parentSessionKey"] == "boss" and UUID(one["liveRunId"])
    assert keys(await listing(api, q=":sub:")) == ["boss:sub:deadbeef", child_key]

    # another tenant sees neither the parent nor the child
    assert keys(await listing(api, "mallory")) == []
    r = await api.client.get(f"{SESSIONS}/{child_key}", headers=auth("mallory"))
    assert r.status_code == 404


async def test_one_session_bad_key_is_422(api: Api) -> None:
    for bad_key in ["has%20space", "k" * 201]:
        r = await api.client.get(f"{SESSIONS}/{bad_key}", headers=auth())
        assert r.status_code == 422 and error_of(r)["field"] == "sessionKey", r.text
    r = await api.client.get(f"{SESSIONS}/nope", headers=auth())
    assert r.status_code == 404
