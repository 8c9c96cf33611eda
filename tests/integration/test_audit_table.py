"""audit_events is append-only: the app role may add and (as an admin) read, never rewrite."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.audit.record import record_audit
from app.auth.principal import Principal
from app.core.request_id import REQUEST_ID
from app.db.engine import Database
from tests.integration.api_support import make_settings, running_api

OWNER = Principal("alice", "acme", "owner")
MEMBER = Principal("bob", "acme", "member")
OTHER = Principal("mallory", "evil", "owner")


async def _add(db: Database, who: Principal, action: str = "agent.created") -> None:
    async with db.tenant(who) as s:
        await record_audit(s, who, action, target_type="agent", target_id="a1", after={"n": 1})


async def test_admins_read_their_tenant_only_and_members_read_nothing(database: Database) -> None:
    token = REQUEST_ID.set("req-1")
    try:
        await _add(database, OWNER)
    finally:
        REQUEST_ID.reset(token)
    await _add(database, MEMBER, "run.created")
    await _add(database, OTHER)
    async with database.tenant(OWNER) as s:
        rows = (await s.execute(text("SELECT * FROM audit_events ORDER BY id"))).mappings().all()
    assert [(r["actor_id"], r["actor_role"], r["action"]) for r in rows] == [
        ("alice", "owner", "agent.created"),
        ("bob", "member", "run.created"),
    ]
    assert rows[0]["request_id"] == "req-1" and rows[1]["request_id"] is None
    async with database.tenant(MEMBER) as s:
        assert (await s.execute(text("SELECT count(*) FROM audit_events"))).scalar_one() == 0


async def test_no_tenant_can_write_into_another_tenants_trail(database: Database) -> None:
    with pytest.raises(DBAPIError, match="row-level security"):
        async with database.tenant(OTHER) as s:
            await record_audit(
                s, Principal("mallory", "acme", "owner"), "agent.deleted", target_type="agent"
            )


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE audit_events SET action = 'nothing'",
        "DELETE FROM audit_events",
        "TRUNCATE audit_events",
    ],
)
async def test_the_app_role_cannot_rewrite_history(database: Database, statement: str) -> None:
    await _add(database, OWNER)
    with pytest.raises(DBAPIError, match="permission denied"):
        async with database.tenant(OWNER) as s:
            await s.execute(text(statement))


@pytest.mark.parametrize(
    "statement",
    ["UPDATE audit_events SET action = 'x'", "DELETE FROM audit_events", "TRUNCATE audit_events"],
)
async def test_even_the_table_owner_cannot_rewrite_history(
    database: Database, statement: str
) -> None:
    await _add(database, OWNER)
    with pytest.raises(DBAPIError, match="append-only"):
        async with database.owner() as s:
            await s.execute(text(statement))


async def test_every_answer_carries_a_request_id(db_url: str) -> None:
    async with running_api(make_settings(db_url)) as api:
        mine = await api.client.get("/healthz", headers={"X-Request-Id": "web-42"})
        assert mine.headers["x-request-id"] == "web-42"
        bad = await api.client.get("/healthz", headers={"X-Request-Id": "no spaces <allowed>"})
        fresh = await api.client.get("/nope")
    assert bad.headers["x-request-id"].startswith("req_")
    assert fresh.status_code == 404 and fresh.headers["x-request-id"].startswith("req_")
