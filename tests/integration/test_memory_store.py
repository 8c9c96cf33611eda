"""The store's verbs as one tenant, and RLS keeping tenants' memories apart at the SQL level."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.auth.principal import Principal
from app.db.engine import Database
from app.memory.embedders import OfflineEmbedder
from app.memory.store import ListCursor, MemoryStore


@pytest.fixture
def store(database: Database) -> MemoryStore:
    return MemoryStore(database, OfflineEmbedder(), chunk_chars=300, overlap_chars=60)


async def test_rls_isolates_memories(
    database: Database, store: MemoryStore, alice: Principal, mallory: Principal
) -> None:
    [mine] = await store.create(alice, "Alice's secret: the vault code is 1234.")
    await store.create(mallory, "Mallory's note.")
    async with database.tenant(mallory) as s:
        visible = (
            (await s.execute(text("SELECT content FROM agent_memory_entries"))).scalars().all()
        )
        assert visible == ["Mallory's note."]
        # even a direct id lookup, an update or a delete of Alice's row touches nothing
        assert (
            await s.execute(
                text("SELECT 1 FROM agent_memory_entries WHERE id = :id"), {"id": mine.id}
            )
        ).first() is None
        updated = await s.execute(
            text("UPDATE agent_memory_entries SET content = 'pwned' WHERE id = :id"),
            {"id": mine.id},
        )
        assert updated.rowcount == 0  # type: ignore[attr-defined]
    assert await store.get(mallory, mine.id) is None
    assert await store.update(mallory, mine.id, importance=1.0) is None
    assert await store.delete(mallory, mine.id) is False
    again = await store.get(alice, mine.id, count_access=False)
    assert (
        again is not None and again.content.startswith("Alice's secret") and again.importance == 0.5
    )


async def test_rls_rejects_rows_for_another_tenant(database: Database, mallory: Principal) -> None:
    with pytest.raises(DBAPIError, match="row-level security"):
        async with database.tenant(mallory) as s:
            await s.execute(
                text("INSERT INTO agent_memory_entries (tenant_id, content) VALUES ('acme', 'x')")
            )


async def test_chunked_document_and_listing(store: MemoryStore, alice: Principal) -> None:
    text_ = " ".join(f"Paragraph sentence {i} talks about item {i}." for i in range(40))
    chunks = await store.create(alice, text_, tags=["doc", "doc"], importance=0.7)
    assert len(chunks) > 3
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
    assert len({c.document_id for c in chunks}) == 1 and chunks[0].document_id is not None
    assert all(c.tags == ["doc"] and c.importance == 0.7 for c in chunks)
    assert all(c.embedder == "offline:hash-v1" and c.embedding_dim == 256 for c in chunks)
    listed = await store.list(alice, document_id=chunks[0].document_id, limit=100)
    assert {r.id for r in listed} == {c.id for c in chunks}
    page = await store.list(alice, limit=2)
    rest = await store.list(alice, limit=100, before=ListCursor(page[-1].created_at, page[-1].id))
    assert len(page) + len(rest) == len(chunks)
    assert not {r.id for r in page} & {r.id for r in rest}


async def test_update_reembeds_content(
    database: Database, store: MemoryStore, alice: Principal
) -> None:
    [entry] = await store.create(alice, "old words")
    async with database.owner() as s:
        before = (
            await s.execute(text("SELECT embedding::text FROM agent_memory_entries"))
        ).scalar()
    updated = await store.update(alice, entry.id, content="entirely different words")
    assert updated is not None and updated.updated_at > entry.updated_at
    async with database.owner() as s:
        row = (
            await s.execute(
                text("SELECT embedding::text, content_tsv::text FROM agent_memory_entries")
            )
        ).one()
    assert row[0] != before and "differ" in row[1]
    with pytest.raises(ValueError):
        await store.update(alice, entry.id, content="  ")
    with pytest.raises(ValueError, match="longer than one chunk"):  # would bypass chunking
        await store.update(alice, entry.id, content="w " * 151)  # 302 > chunk_chars=300


def test_cursor_round_trip() -> None:
    import uuid
    from datetime import UTC, datetime

    cursor = ListCursor(datetime(2025, 1, 2, 3, 4, 5, 678, tzinfo=UTC), uuid.uuid4())
    assert ListCursor.parse(cursor.encode()) == cursor
    out_of_range = "0001-01-01T00:00:00+14:00_" + str(uuid.uuid4())  # before year 1 in UTC
    naive = "2025-01-01T00:00:00_" + str(uuid.uuid4())
    for bad in ("", "x", "2025-01-01_notauuid", naive, out_of_range):
        with pytest.raises(ValueError):
            ListCursor.parse(bad)
