"""The engine's transactions: a dead pooled connection is replaced (no pre-ping), and
`Database.sharing` folds a phase's transactions into one without crossing tenants."""

from __future__ import annotations

import asyncio
import json

import pytest
from sqlalchemy import text

from app.auth.principal import Principal
from app.db.engine import Database

CLAIMS = text("SELECT current_setting('request.jwt.claims', true)")
TXID = text("SELECT txid_current()")


async def _kill_pooled_connections(database: Database) -> int:
    """Terminate every other connection to the test database (as a restart would)."""
    async with database.owner() as s:
        killed = await s.scalar(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    return int(killed or 0)


async def test_a_connection_the_server_closed_is_replaced_before_the_transaction(
    database: Database, alice: Principal
) -> None:
    # Two pooled connections, both idle, then terminated behind the pool's back.
    async with database.tenant(alice) as a, database.tenant(alice) as b:
        await a.execute(text("SELECT 1"))
        await b.execute(text("SELECT 1"))
    assert await _kill_pooled_connections(database) >= 1
    await asyncio.sleep(0.1)
    for _ in range(3):  # each would be handed a dead connection without the retry
        async with database.tenant(alice) as s:
            assert await s.scalar(text("SELECT 1")) == 1
    async with database.queue() as s:
        assert await s.scalar(text("SELECT current_user")) == "agent_runtime_worker"


async def test_sharing_folds_transactions_of_the_tenant_into_one(
    database: Database, alice: Principal, mallory: Principal
) -> None:
    service = alice.as_service()
    txids: list[int] = []

    async def one(p: Principal) -> None:
        async with database.tenant(p) as s:
            txids.append(int(await s.scalar(TXID) or 0))
            claims = json.loads(str(await s.scalar(CLAIMS)))
            assert claims["app_metadata"] == {"tenant_id": p.tenant_id, "role": p.role}

    async with database.sharing(alice):
        await one(alice)
        await asyncio.gather(one(alice), one(service))  # concurrent users take turns
        async with database.tenant(mallory) as s:  # another tenant: never the shared one
            other = int(await s.scalar(TXID) or 0)
            assert "acme" not in str(await s.scalar(CLAIMS))
    assert len(set(txids)) == 1 and other not in txids
    async with database.tenant(alice) as s:  # after the block: transactions of their own
        assert int(await s.scalar(TXID) or 0) not in txids


async def test_a_nested_or_failed_user_of_a_shared_transaction_gets_its_own(
    database: Database, alice: Principal
) -> None:
    async with database.sharing(alice):
        async with database.tenant(alice) as outer:
            shared = await outer.scalar(TXID)
            async with database.tenant(alice) as inner:  # nested in the same task
                assert await inner.scalar(TXID) != shared
        with pytest.raises(Exception, match="division by zero"):
            async with database.tenant(alice) as s:
                await s.execute(text("SELECT 1/0"))
        async with database.tenant(alice) as s:  # the shared one is aborted: not used again
            assert await s.scalar(text("SELECT 1")) == 1
