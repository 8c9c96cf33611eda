"""Quotas per tenant through the HTTP API: each limit refuses a new run with 429 + Retry-After and
stores nothing, concurrent posts cannot overshoot, the daily token budget ends a run mid-way,
`GET /usage` shows limits and usage, and `GET/PUT /quotas` is for admins (validated, audited)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.auth.principal import Principal
from app.core import events as ev
from app.db.engine import Database
from app.runtime.loop import execute_run
from app.tenants.quotas import add_tokens, tokens_today
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api
from tests.integration.run_support import claim, events, of_type, status

pytestmark = pytest.mark.timeout(60)

RUNS = "/api/agent-runtime"


@asynccontextmanager
async def quota_api(database: Database, db_url: str, **quotas: int) -> AsyncIterator[Api]:
    """The app with these `quota_*` settings."""
    async with running_api(make_settings(db_url, **quotas), database) as api:
        yield api


@pytest.fixture
async def api(database: Database, db_url: str) -> AsyncIterator[Api]:
    async with quota_api(database, db_url) as api:
        yield api


async def post(
    api: Api, message: str = "hello", user: str = "alice", **body: Any
) -> httpx.Response:
    return await api.client.post(RUNS, json={"message": message, **body}, headers=auth(user))


async def stored(database: Database, tenant: str = "acme") -> tuple[int, int]:
    """(runs, sessions) of the tenant."""
    async with database.owner() as s:
        runs = await s.scalar(
            text("SELECT count(*) FROM agent_run_queue WHERE tenant_id = :t"), {"t": tenant}
        )
        sessions = await s.scalar(
            text("SELECT count(*) FROM agent_sessions WHERE tenant_id = :t"), {"t": tenant}
        )
    return int(runs or 0), int(sessions or 0)


def refused(r: httpx.Response, limit: str, value: int, used: int) -> int:
    """Assert the 429 shape; the Retry-After seconds."""
    assert r.status_code == 429, r.text
    error = error_of(r)
    assert error["code"] == "quota_exceeded"
    assert error["details"] == {"limit": limit, "value": value, "used": used}
    assert limit in error["message"]
    retry_after = int(r.headers["Retry-After"])
    assert retry_after >= 1
    return retry_after


async def put_quotas(api: Api, user: str = "alice", **body: Any) -> httpx.Response:
    return await api.client.put(f"{RUNS}/quotas", json=body, headers=auth(user))


# ------------------------------------------------------------------ each limit


async def test_runs_per_minute(database: Database, db_url: str) -> None:
    async with quota_api(database, db_url, quota_runs_per_minute=2) as api:
        for _ in range(2):
            assert (await post(api)).status_code == 202
        before = await stored(database)
        r = await post(api, sessionKey="never-stored")
        wait = refused(r, "runsPerMinute", 2, 2)
        assert wait <= 60
        assert await stored(database) == before  # neither the run nor its new session
        # another tenant is not affected
        assert (await post(api, user="mallory")).status_code == 202
        # the window slides: once the counted runs are older than a minute, posts pass again
        async with database.owner() as s:
            await s.execute(
                text("UPDATE agent_run_queue SET created_at = now() - interval '61 seconds'")
            )
        assert (await post(api)).status_code == 202


async def test_runs_per_minute_retry_after_counts_from_the_oldest_run(
    database: Database, db_url: str
) -> None:
    async with quota_api(database, db_url, quota_runs_per_minute=1) as api:
        assert (await post(api)).status_code == 202
        async with database.owner() as s:
            await s.execute(
                text("UPDATE agent_run_queue SET created_at = now() - interval '45 seconds'")
            )
        wait = refused(await post(api), "runsPerMinute", 1, 1)
        assert 14 <= wait <= 16


async def test_queued_runs(database: Database, db_url: str) -> None:
    async with quota_api(database, db_url, quota_queued_runs=1) as api:
        first = (await post(api)).json()
        before = await stored(database)
        assert refused(await post(api), "queuedRuns", 1, 1) == 5
        assert await stored(database) == before
        # a message steered into a live run is no new run: it passes
        steered = await post(api, "more", sessionKey=first["sessionKey"], ifBusy="steer")
        assert steered.status_code == 202 and steered.json()["status"] == "steered"
        # /chat is refused the same way
        r = await api.client.post(
            f"{RUNS}/chat",
            json={
                "id": "c1",
                "messages": [
                    {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
                ],
            },
            headers=auth(),
        )
        refused(r, "queuedRuns", 1, 1)
        assert await stored(database) == before


async def test_active_runs(database: Database, db_url: str) -> None:
    async with quota_api(database, db_url, quota_active_runs=1) as api:
        run = (await post(api)).json()
        assert (await post(api)).status_code == 202  # nothing active yet: queued
        await claim(api, run["runId"])
        before = await stored(database)
        assert refused(await post(api), "activeRuns", 1, 1) == 5
        assert await stored(database) == before


async def test_tokens_per_day_refuses_posts_until_utc_midnight(
    api: Api, database: Database
) -> None:
    assert (await put_quotas(api, tokensPerDay=100)).status_code == 200
    async with database.owner() as s:
        await s.execute(
            text(
                "INSERT INTO tenant_usage_daily (tenant_id, day, input_tokens, output_tokens) "
                "VALUES ('acme', (now() AT TIME ZONE 'UTC')::date, 60, 40), "
                "('acme', (now() AT TIME ZONE 'UTC')::date - 1, 900, 900)"
            )
        )
    wait = refused(await post(api), "tokensPerDay", 100, 100)
    now = datetime.now(UTC)
    midnight = datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)
    assert abs(wait - (midnight - now).total_seconds()) < 5
    assert await stored(database) == (0, 0)
    assert (await post(api, user="mallory")).status_code == 202


# ------------------------------------------------------------------ the race


async def test_concurrent_posts_cannot_overshoot(database: Database, db_url: str) -> None:
    async with quota_api(database, db_url, quota_queued_runs=3) as api:
        answers = await asyncio.gather(*(post(api, f"m{i}") for i in range(12)))
    codes = sorted(r.status_code for r in answers)
    assert codes == [202] * 3 + [429] * 9
    assert await stored(database) == (3, 3)


LOCK = text("SELECT pg_advisory_xact_lock(140014, hashtext('acme'))")


async def test_posts_of_a_limited_tenant_wait_for_its_lock_unlimited_ones_take_none(
    database: Database, db_url: str
) -> None:
    """The admission lock is the tenant's advisory lock, taken only with a counting limit set:
    while something holds it, a limited tenant's post waits; an unlimited one's does not."""
    async with quota_api(database, db_url) as api, database.owner() as holder:
        await holder.execute(LOCK)
        r = await asyncio.wait_for(post(api), 5)
        assert r.status_code == 202
    async with quota_api(database, db_url, quota_queued_runs=10) as api:
        async with database.owner() as holder:
            await holder.execute(LOCK)
            waiting = asyncio.ensure_future(post(api))
            await asyncio.sleep(0.5)
            assert not waiting.done()
        assert (await asyncio.wait_for(waiting, 5)).status_code == 202


# ------------------------------------------------------------------ token budget mid-run


async def test_a_run_over_the_daily_budget_fails_after_storing_its_work(
    api: Api, database: Database
) -> None:
    assert (await put_quotas(api, tokensPerDay=1)).status_code == 200
    run = (await post(api, "/tool list_files")).json()
    leased = await claim(api, run["runId"])
    await execute_run(leased, settings=api.runtime.settings)
    found = await status(api, run["runId"])
    assert found["status"] == "failed"
    assert found["error"]["code"] == "quota_exceeded"
    assert "tokensPerDay" in found["error"]["message"]
    stored_events = await events(api, run["runId"])
    # the first call was made and kept (its message, its tool call, its usage); no second call
    [usage] = of_type(stored_events, ev.USAGE)
    [message] = of_type(stored_events, ev.ASSISTANT_MESSAGE)
    assert message["toolCalls"][0]["name"] == "list_files"
    assert of_type(stored_events, ev.RUN_FAILED)
    transcript = await api.client.get(
        f"{RUNS}/sessions/{run['sessionKey']}/messages", headers=auth()
    )
    assert transcript.status_code == 200
    async with database.owner() as s:
        day = (
            await s.execute(
                text(
                    "SELECT sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,"
                    " sum(runs) AS runs FROM tenant_usage_daily"
                )
            )
        ).one()
    assert (day.input_tokens, day.output_tokens) == (usage["inputTokens"], usage["outputTokens"])
    assert day.runs == 1
    # and the next post is refused until midnight
    refused(await post(api), "tokensPerDay", 1, usage["inputTokens"] + usage["outputTokens"])


# ------------------------------------------------------------------ usage


async def test_usage_shows_limits_and_current_usage(database: Database, db_url: str) -> None:
    async with quota_api(database, db_url, quota_queued_runs=10, quota_runs_per_minute=50) as api:
        assert (await put_quotas(api, runsPerMinute=20)).status_code == 200
        first = (await post(api)).json()
        await post(api)
        await post(api)
        await claim(api, first["runId"])
        r = await api.client.get(f"{RUNS}/usage", headers=auth("bob", tenant="acme", role="member"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["limits"] == {
        "runsPerMinute": {"value": 20, "source": "tenant"},
        "activeRuns": {"value": 0, "source": "default"},
        "queuedRuns": {"value": 10, "source": "default"},
        "tokensPerDay": {"value": 0, "source": "default"},
    }
    usage = body["usage"]
    assert {k: usage[k] for k in ("runsLastMinute", "activeRuns", "queuedRuns", "tokensToday")} == {
        "runsLastMinute": 3,
        "activeRuns": 1,
        "queuedRuns": 2,
        "tokensToday": 0,
    }
    resets = datetime.fromisoformat(usage["resetsAt"])
    assert resets.utcoffset() == timedelta(0) and (resets.hour, resets.minute) == (0, 0)
    assert timedelta(0) < resets - datetime.now(UTC) <= timedelta(days=1)


# ------------------------------------------------------------------ the admin API


async def test_members_cannot_read_or_change_quotas(api: Api) -> None:
    member = auth("bob", tenant="acme", role="member")
    r = await api.client.get(f"{RUNS}/quotas", headers=member)
    assert r.status_code == 403 and error_of(r)["code"] == "forbidden_role"
    r = await api.client.put(f"{RUNS}/quotas", json={"queuedRuns": 1000}, headers=member)
    assert r.status_code == 403 and error_of(r)["code"] == "forbidden_role"
    assert (await api.client.get(f"{RUNS}/quotas", headers=auth())).json()["overrides"] == {
        "runsPerMinute": None,
        "activeRuns": None,
        "queuedRuns": None,
        "tokensPerDay": None,
    }


@pytest.mark.parametrize(
    "body",
    [
        {"queuedRuns": -1},
        {"queuedRuns": "5"},
        {"queuedRuns": 1.5},
        {"queuedRuns": True},
        {"tokensPerDay": 2**63},
        {"runsPerMinute": 2**31},
        {"burst": 3},
    ],
)
async def test_invalid_quotas_are_422(api: Api, body: dict[str, Any]) -> None:
    r = await put_quotas(api, **body)
    assert r.status_code == 422, r.text
    assert error_of(r)["code"] == "validation_error"


async def test_admins_set_overrides_audited(api: Api, database: Database) -> None:
    r = await put_quotas(api, queuedRuns=5, tokensPerDay=0)
    assert r.status_code == 200, r.text
    assert r.json()["limits"]["queuedRuns"] == {"value": 5, "source": "tenant"}
    assert r.json()["limits"]["tokensPerDay"] == {"value": 0, "source": "tenant"}
    assert r.json()["limits"]["activeRuns"] == {"value": 0, "source": "default"}
    r = await put_quotas(api, activeRuns=2)  # a PUT replaces: queuedRuns back to the default
    assert r.json()["overrides"] == {
        "runsPerMinute": None,
        "activeRuns": 2,
        "queuedRuns": None,
        "tokensPerDay": None,
    }
    got = await api.client.get(f"{RUNS}/quotas", headers=auth())
    assert got.json() == r.json()
    other = await api.client.get(f"{RUNS}/quotas", headers=auth("mallory"))
    assert other.json()["overrides"]["activeRuns"] is None
    async with database.owner() as s:
        rows = (
            await s.execute(
                text(
                    "SELECT tenant_id, actor_id, action, target_type, before, after "
                    "FROM audit_events ORDER BY id"
                )
            )
        ).all()
    assert [(r.tenant_id, r.actor_id, r.action, r.target_type) for r in rows] == [
        ("acme", "alice", "quota.updated", "quota"),
        ("acme", "alice", "quota.updated", "quota"),
    ]
    assert rows[0].before["queuedRuns"] is None and rows[0].after["queuedRuns"] == 5
    assert rows[1].before["queuedRuns"] == 5 and rows[1].after == {
        "runsPerMinute": None,
        "activeRuns": 2,
        "queuedRuns": None,
        "tokensPerDay": None,
    }


async def test_members_count_against_the_tenants_limits_not_only_their_own(
    database: Database, db_url: str
) -> None:
    """A member's RLS shows only their own sessions' runs; the quota must still count every run
    of the tenant (and /usage show the tenant's numbers), or each member would get the limit."""
    async with quota_api(database, db_url, quota_queued_runs=2) as api:
        for user in ("bob", "carol"):
            r = await api.client.post(
                RUNS, json={"message": "hi"}, headers=auth(user, tenant="acme", role="member")
            )
            assert r.status_code == 202, r.text
        dave = auth("dave", tenant="acme", role="member")
        r = await api.client.post(RUNS, json={"message": "hi"}, headers=dave)
        refused(r, "queuedRuns", 2, 2)
        usage = (await api.client.get(f"{RUNS}/usage", headers=dave)).json()
    assert usage["usage"]["queuedRuns"] == 2
    assert await stored(database) == (2, 2)


async def test_a_tenants_day_is_spread_over_shard_rows_and_summed(
    database: Database,
) -> None:
    """Usage goes to one of 16 rows per tenant and day (migration 0024), so a busy tenant's
    writers do not all queue on one row lock; the day's total is the sum of its rows."""
    acme = Principal(user_id="alice", tenant_id="acme", role="owner")
    for _ in range(40):
        async with database.tenant(acme) as s:
            await add_tokens(s, "acme", 3, 2, runs=1)
    async with database.tenant(acme) as s:
        used, _now = await tokens_today(s, "acme")
    assert used == 200
    async with database.owner() as s:
        shards, runs = (
            await s.execute(
                text("SELECT count(*), sum(runs) FROM tenant_usage_daily WHERE tenant_id = 'acme'")
            )
        ).one()
    assert runs == 40 and shards > 1  # 40 random picks of 16 all on one shard: p = 16^-39
