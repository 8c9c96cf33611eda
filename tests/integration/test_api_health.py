"""Health and readiness, the last-resort 500 handler, and the OpenAPI description."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from app.api.routes import health
from app.api.routes.health import SandboxReport
from app.config import Settings
from app.db.engine import Database
from app.db.migrate import head_revision
from app.tools.sandbox.detect import describe_isolation
from tests.integration.api_support import error_of, make_settings, running_api

pytestmark = pytest.mark.timeout(30)


def _admin(server_url: str) -> psycopg.Connection:
    u = make_url(server_url)
    return psycopg.connect(
        dbname=u.database or "postgres",
        user=u.username,
        password=u.password,
        host=u.host or u.query.get("host"),  # type: ignore[arg-type]
        port=u.port,
        autocommit=True,
    )


@pytest.fixture
def empty_db_url(server_url: str) -> Iterator[str]:
    """A database that exists but was never migrated."""
    name = f"empty_{uuid.uuid4().hex[:12]}"
    with _admin(server_url) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with _admin(server_url) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_healthz_and_readyz_on_a_migrated_database(database: Database, db_url: str) -> None:
    async with running_api(make_settings(db_url), database) as api:
        r = await api.client.get("/healthz")
        assert r.status_code == 200 and r.json() == {"status": "ok"}
        r = await api.client.get("/readyz")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["status"] == "ready" and body["database"] == "ok"
        assert body["migrations"] == "current"
        assert body["revision"] == head_revision() and body["revision"] is not None
        assert body["events"] == "listening"


async def test_readyz_503_on_an_unmigrated_database(empty_db_url: str) -> None:
    async with running_api(make_settings(empty_db_url)) as api:  # the app opens its own pool
        r = await api.client.get("/readyz")
        assert r.status_code == 503, r.text
        body = r.json()
        assert body["status"] == "not_ready" and body["database"] == "ok"
        assert body["migrations"] == "missing" and body["revision"] is None
        assert "not migrated" in body["error"]["message"]
        assert (await api.client.get("/healthz")).status_code == 200


async def test_readyz_503_on_an_outdated_database(database: Database, db_url: str) -> None:
    async with database.owner() as s:
        await s.execute(text("UPDATE alembic_version SET version_num = 'old'"))
    async with running_api(make_settings(db_url), database) as api:
        r = await api.client.get("/readyz")
        assert r.status_code == 503
        assert r.json()["migrations"] == "outdated" and r.json()["revision"] == "old"


async def test_unreachable_database_is_503_not_500() -> None:
    settings = make_settings("postgresql://nobody:pw@127.0.0.1:1/none")
    async with running_api(settings) as api:  # starts anyway: the event hub retries
        assert api.runtime.hub.listening is False
        r = await api.client.get("/readyz")
        assert r.status_code == 503, r.text
        assert r.json()["database"] == "unreachable" and r.json()["events"] == "polling"
        assert (await api.client.get("/healthz")).status_code == 200
        assert r.json()["sandbox"]["mode"] in ("bubblewrap", "disabled")  # reported all the same


# ---------------------------------------------------------------------------- sandbox isolation


async def test_readyz_says_which_sandbox_isolation_is_active(
    database: Database, db_url: str
) -> None:
    settings = make_settings(db_url)
    async with running_api(settings, database) as api:
        r = await api.client.get("/readyz")
    assert r.status_code == 200, r.text
    sandbox = r.json()["sandbox"]
    assert sandbox == describe_isolation(settings)  # what this machine offers, every field
    assert sandbox["mode"] in ("bubblewrap", "disabled")  # never a silent unsafe fallback
    assert sandbox["network"] is False
    assert sandbox["limits"]["timeoutSeconds"] == settings.sandbox_timeout_seconds


@pytest.mark.parametrize("mode", ["disabled", "unsafe-subprocess"])
async def test_readyz_reports_a_disabled_or_unsafe_sandbox_and_stays_ready(
    database: Database, db_url: str, mode: str
) -> None:
    async with running_api(make_settings(db_url, sandbox_mode=mode), database) as api:
        r = await api.client.get("/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready", r.text
    sandbox = r.json()["sandbox"]
    assert sandbox["mode"] == mode
    if mode == "disabled":
        assert sandbox["available"] is False and "SANDBOX_MODE=disabled" in sandbox["reason"]
    else:
        assert sandbox["available"] is True and sandbox["bwrap"] is None


class CountingProbe:
    """A stand-in for `describe_isolation` that counts its calls and the threads they ran on."""

    def __init__(self, *, delay: float = 0.0, fail: bool = False, available: bool = True) -> None:
        self.delay, self.fail, self.available = delay, fail, available
        self.threads: list[int] = []

    def __call__(self, settings: Settings) -> dict[str, Any]:
        self.threads.append(threading.get_ident())
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("probe exploded")
        if not self.available:
            return {"mode": "disabled", "available": False, "reason": "no bwrap"}
        return {"mode": "bubblewrap", "available": True, "userns": True, "limits": {}}


async def test_sandbox_probe_runs_off_the_event_loop_once(database: Database, db_url: str) -> None:
    probe = CountingProbe()
    async with running_api(make_settings(db_url), database) as api:
        api.app.state.sandbox_report = SandboxReport(api.runtime.settings, probe)
        for _ in range(3):
            r = await api.client.get("/readyz")
            assert r.json()["sandbox"]["mode"] == "bubblewrap"
    assert len(probe.threads) == 1  # cached
    assert probe.threads[0] != threading.get_ident()  # not on the event loop's thread


async def test_an_unavailable_sandbox_is_probed_again_later(
    database: Database, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = CountingProbe(available=False)
    async with running_api(make_settings(db_url), database) as api:
        api.app.state.sandbox_report = SandboxReport(api.runtime.settings, probe)
        await api.client.get("/readyz")
        await api.client.get("/readyz")
        assert len(probe.threads) == 1  # cached for a while
        monkeypatch.setattr(health, "SANDBOX_RECHECK_SECONDS", 0.0)
        r = await api.client.get("/readyz")
    assert len(probe.threads) == 2 and r.json()["sandbox"]["reason"] == "no bwrap"


async def test_a_slow_or_broken_probe_never_makes_the_server_not_ready(
    database: Database, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(health, "SANDBOX_WAIT_SECONDS", 0.1)
    async with running_api(make_settings(db_url), database) as api:
        api.app.state.sandbox_report = SandboxReport(api.runtime.settings, CountingProbe(delay=1))
        started = time.monotonic()
        r = await api.client.get("/readyz")
        assert time.monotonic() - started < 0.9  # did not wait for the probe
        assert r.status_code == 200 and r.json()["status"] == "ready"
        assert r.json()["sandbox"] == {
            **r.json()["sandbox"],
            "mode": "unknown",
            "available": False,
            "reason": "the sandbox probe is still running",
        }
        await asyncio.sleep(1)
        r = await api.client.get("/readyz")  # the same probe has finished meanwhile
        assert r.json()["sandbox"]["mode"] == "bubblewrap"

        api.app.state.sandbox_report = SandboxReport(api.runtime.settings, CountingProbe(fail=True))
        r = await api.client.get("/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready"
    assert r.json()["sandbox"]["mode"] == "unknown"
    assert r.json()["sandbox"]["reason"] == "the sandbox probe failed: RuntimeError"


async def test_unexpected_errors_are_a_json_500_without_internals(
    database: Database, db_url: str
) -> None:
    async with running_api(make_settings(db_url), database, raise_app_exceptions=False) as api:

        @api.app.get("/boom")
        async def boom() -> None:
            raise RuntimeError("password=hunter2 in a stack trace")

        r = await api.client.get("/boom")
        assert r.status_code == 500
        assert error_of(r) == {"code": "internal_error", "message": "internal server error"}
        assert "hunter2" not in r.text


async def test_openapi_describes_the_contract(database: Database, db_url: str) -> None:
    async with running_api(make_settings(db_url), database) as api:
        spec = (await api.client.get("/openapi.json")).json()
    paths = spec["paths"]
    assert {
        "/api/agent-runtime",
        "/api/agent-runtime/status",
        "/api/agent-runtime/stream",
        "/api/agent-runtime/cancel",
        "/api/agent-runtime/sessions",
        "/api/agent-runtime/sessions/{sessionKey}/messages",
        "/api/agent-runtime/runs/{runId}/events",
        "/healthz",
        "/readyz",
    } <= set(paths)
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    post = paths["/api/agent-runtime"]["post"]
    assert post["security"] == [{"HTTPBearer": []}]
    assert {"202", "400", "401", "404", "409", "413", "415", "422"} <= set(post["responses"])
    assert "session_busy" in post["responses"]["409"]["description"]
    assert post["description"].startswith("Queue a message")
    run_request = spec["components"]["schemas"]["RunRequest"]
    assert set(run_request["properties"]) == {"message", "sessionKey", "agentId", "ifBusy"}
    accepted = spec["components"]["schemas"]["RunAccepted"]["properties"]["status"]
    assert accepted["enum"] == ["queued", "steered", "collected"]
    assert run_request["properties"]["message"]["maxLength"] == 32_000
    assert "examples" in run_request
    stream = paths["/api/agent-runtime/stream"]["get"]
    assert "text/event-stream" in stream["responses"]["200"]["content"]
    status_props = spec["components"]["schemas"]["RunStatus"]["properties"]
    assert {"runId", "sessionKey", "status", "usage", "state", "attempts"} <= set(status_props)
    assert paths["/healthz"]["get"].get("security") is None
