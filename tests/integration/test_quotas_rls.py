"""RLS of the quota tables, in raw SQL: overrides readable by every member of the tenant and
writable by its admins only, daily usage confined to its tenant (and never deleted), the claim
bookkeeping the worker role's alone."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, ProgrammingError

from app.auth.principal import Principal
from app.db.engine import Database

OWNER = Principal("alice", "acme", "owner")
ADMIN = Principal("ann", "acme", "admin")
MEMBER = Principal("bob", "acme", "member")
OTHER = Principal("mallory", "evil", "owner")

SET = text(
    "INSERT INTO tenant_quotas (tenant_id, queued_runs, updated_by) VALUES (:t, :n, 'x') "
    "ON CONFLICT (tenant_id) DO UPDATE SET queued_runs = excluded.queued_runs"
)
USAGE = text(
    "INSERT INTO tenant_usage_daily (tenant_id, day, input_tokens) VALUES (:t, current_date, 5)"
)


async def test_admins_write_overrides_members_only_read_them(database: Database) -> None:
    async with database.tenant(OWNER) as s:
        await s.execute(SET, {"t": "acme", "n": 3})
    async with database.tenant(ADMIN) as s:
        await s.execute(SET, {"t": "acme", "n": 4})
    async with database.tenant(MEMBER) as s:
        assert (await s.execute(text("SELECT queued_runs FROM tenant_quotas"))).scalar_one() == 4
        updated = await s.execute(text("UPDATE tenant_quotas SET queued_runs = 1000"))
        assert updated.rowcount == 0  # type: ignore[attr-defined]
    with pytest.raises(DBAPIError, match="row-level security"):
        async with database.tenant(Principal("bob", "fresh", "member")) as s:
            await s.execute(SET, {"t": "fresh", "n": 1000})
    with pytest.raises(DBAPIError, match="row-level security"):
        async with database.tenant(OTHER) as s:
            await s.execute(SET, {"t": "acme", "n": 1000})
    async with database.tenant(OTHER) as s:
        assert (await s.execute(text("SELECT count(*) FROM tenant_quotas"))).scalar_one() == 0
    with pytest.raises(ProgrammingError, match="permission denied"):
        async with database.tenant(OWNER) as s:
            await s.execute(text("DELETE FROM tenant_quotas"))


async def test_daily_usage_is_confined_to_its_tenant_and_never_deleted(database: Database) -> None:
    async with database.tenant(MEMBER) as s:
        await s.execute(USAGE, {"t": "acme"})
    with pytest.raises(DBAPIError, match="row-level security"):
        async with database.tenant(OTHER) as s:
            await s.execute(USAGE, {"t": "acme"})
    async with database.tenant(OTHER) as s:
        assert (await s.execute(text("SELECT count(*) FROM tenant_usage_daily"))).scalar_one() == 0
        reset = await s.execute(text("UPDATE tenant_usage_daily SET input_tokens = 0"))
        assert reset.rowcount == 0  # type: ignore[attr-defined]
    with pytest.raises(ProgrammingError, match="permission denied"):
        async with database.tenant(OWNER) as s:
            await s.execute(text("DELETE FROM tenant_usage_daily"))


@pytest.mark.parametrize("table", ["tenant_quotas", "tenant_usage_daily"])
async def test_the_worker_role_cannot_read_quota_tables(database: Database, table: str) -> None:
    with pytest.raises(ProgrammingError, match="permission denied"):
        async with database.queue() as s:
            await s.execute(text(f"SELECT * FROM {table}"))  # noqa: S608


async def test_tenant_claims_belong_to_the_worker_role(database: Database) -> None:
    async with database.queue() as s:
        await s.execute(
            text("INSERT INTO tenant_claims (tenant_id, last_claimed_at) VALUES ('acme', now())")
        )
        assert (await s.execute(text("SELECT count(*) FROM tenant_claims"))).scalar_one() == 1
    with pytest.raises(ProgrammingError, match="permission denied"):
        async with database.tenant(OWNER) as s:
            await s.execute(text("SELECT * FROM tenant_claims"))
