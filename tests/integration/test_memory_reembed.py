"""Re-embedding after an embedder change: entries switch embedder, search never mixes vectors."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError

from app.auth.principal import Principal
from app.db.engine import Database
from app.memory.embedders import OfflineEmbedder
from app.memory.reembed import embedding_status, reembed_pending, run_reembed, stale_tenants
from app.memory.search import search_memories
from app.memory.store import MemoryStore
from tests.integration.memory_support import ConceptEmbedder, FailingEmbedder

NOTES = [
    "The automobile needs servicing before the road trip.",
    "The dog walker comes on Tuesdays.",
    "Invoices are due on the 5th of each month.",
    "Holiday requests go to the team lead.",
    "Car park passes are in the top drawer.",
]


async def embedders_of(database: Database) -> list[tuple[str | None, int | None]]:
    async with database.owner() as s:
        rows = await s.execute(
            text("SELECT embedder, embedding_dim FROM agent_memory_entries ORDER BY created_at")
        )
        return [(r.embedder, r.embedding_dim) for r in rows]


async def test_switching_embedder_reembeds_in_batches_without_mixing(
    database: Database, alice: Principal, mallory: Principal
) -> None:
    old = OfflineEmbedder(256)
    for note in NOTES:
        await MemoryStore(database, old).create(alice, note)
    await MemoryStore(database, old).create(mallory, "Mallory's car note.")
    new = ConceptEmbedder("test:concepts", 768)

    # Before re-embedding: no entry has a vector of the new embedder -> vector side is empty,
    # full text still finds what it can.
    outcome = await search_memories(database, alice, new, "automobile servicing")
    assert outcome.vector_search
    assert [r.why["vectorRank"] for r in outcome.results] == [None]
    assert outcome.results[0].record.embedder == "offline:hash-v1"
    status = await embedding_status(database, alice, new)
    assert (status.total, status.current, status.pending) == (5, 0, 5)

    assert await stale_tenants(database, new) == ["acme", "evil"]
    assert await reembed_pending(database, alice, new, batch=2) == 2  # one tenant, one batch
    # Half-way: only the re-embedded entries take part in the vector side.
    outcome = await search_memories(database, alice, new, "car repair", limit=5)
    vector_hits = [r for r in outcome.results if r.why["vectorRank"] is not None]
    assert {r.record.embedder for r in vector_hits} == {"test:concepts"}
    assert len(vector_hits) == 2

    while await reembed_pending(database, None, new, batch=2):  # every tenant
        pass
    assert set(await embedders_of(database)) == {("test:concepts", 768)}
    assert await stale_tenants(database, new) == []
    outcome = await search_memories(database, alice, new, "car repair", limit=2)
    assert outcome.results[0].record.content == NOTES[0]  # found by meaning now
    assert outcome.results[0].why["vectorRank"] == 1

    # Same dimension, other embedder: still never compared.
    other_256 = ConceptEmbedder("test:other", 256)
    outcome = await search_memories(database, alice, other_256, "car repair", limit=5)
    assert all(r.why["vectorRank"] is None for r in outcome.results)


async def test_same_model_other_dimension_is_stale(database: Database, alice: Principal) -> None:
    await MemoryStore(database, OfflineEmbedder(256)).create(alice, "note")
    assert await reembed_pending(database, alice, OfflineEmbedder(768)) == 1
    assert await embedders_of(database) == [("offline:hash-v1", 768)]


async def test_failures_leave_entries_untouched(database: Database, alice: Principal) -> None:
    await MemoryStore(database, OfflineEmbedder()).create(alice, "note")
    from app.memory.embedders import EmbeddingError

    with pytest.raises(EmbeddingError):
        await reembed_pending(database, None, FailingEmbedder("test:down", 768))
    assert await embedders_of(database) == [("offline:hash-v1", 256)]


async def test_run_reembed_until_stopped(database: Database, alice: Principal) -> None:
    for note in NOTES:
        await MemoryStore(database, FailingEmbedder()).create(alice, note)  # stored without vectors
    assert set(await embedders_of(database)) == {(None, None)}
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_reembed(database, OfflineEmbedder(), stop, batch=2, interval_seconds=0.05)
    )
    for _ in range(100):
        if set(await embedders_of(database)) == {("offline:hash-v1", 256)}:
            break
        await asyncio.sleep(0.05)
    assert set(await embedders_of(database)) == {("offline:hash-v1", 256)}
    stop.set()
    await asyncio.wait_for(task, 5)


async def test_worker_role_sees_only_what_discovery_needs(
    database: Database, alice: Principal
) -> None:
    await MemoryStore(database, OfflineEmbedder()).create(alice, "secret plans")
    async with database.queue() as s:
        rows = (await s.execute(text("SELECT tenant_id, embedder FROM agent_memory_entries"))).all()
        assert [tuple(r) for r in rows] == [("acme", "offline:hash-v1")]
    with pytest.raises(ProgrammingError, match="permission denied"):
        async with database.queue() as s:
            await s.execute(text("SELECT content FROM agent_memory_entries"))
    with pytest.raises(ProgrammingError, match="permission denied"):
        async with database.queue() as s:
            await s.execute(text("UPDATE agent_memory_entries SET embedder = 'x'"))
