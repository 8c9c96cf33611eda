"""Re-embedding after an embedder change: entries switch embedder, search never mixes vectors."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from uuid import UUID

import pytest
from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError

from app.auth.principal import Principal
from app.db.engine import Database
from app.memory.embedders import EmbedKind, OfflineEmbedder, hash_embed
from app.memory.reembed import (
    embedding_status,
    reembed_pending,
    run_reembed,
    stale_tenants,
    tenant_lock,
)
from app.memory.search import search_memories, vector_literal
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


class GatedEmbedder(OfflineEmbedder):
    """The offline embedder, except each call waits for `release` (a slow provider call)."""

    def __init__(self, dimension: int = 768) -> None:
        super().__init__(dimension)
        self.name = "test:gated"
        self.calls: list[list[str]] = []
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def embed(self, texts: Sequence[str], kind: EmbedKind) -> list[list[float]]:
        self.calls.append(list(texts))
        self.entered.set()
        await self.release.wait()
        return await super().embed(texts, kind)


async def distance_to(database: Database, entry_id: UUID, content: str, dim: int) -> float:
    """Cosine distance between the entry's stored vector and the offline vector of `content`."""
    async with database.owner() as s:
        distance: float = await s.scalar(
            text(
                "SELECT embedding <=> CAST(:v AS vector) FROM agent_memory_entries WHERE id = :id"
            ),
            {"id": entry_id, "v": vector_literal(hash_embed(content, dim))},
        )
    return distance


async def test_an_edit_during_the_embed_call_is_neither_blocked_nor_overwritten(
    database: Database, alice: Principal
) -> None:
    old = OfflineEmbedder(256)
    [edited] = await MemoryStore(database, old).create(alice, "The deploy key lives in vault A.")
    [retagged] = await MemoryStore(database, old).create(alice, "Backups run nightly.")
    new = GatedEmbedder(768)
    batch = asyncio.create_task(reembed_pending(database, alice, new))
    try:
        await asyncio.wait_for(new.entered.wait(), 5)  # the batch is inside the provider call
        # No transaction or row lock is held meanwhile: these edits do not wait for the embed.
        store = MemoryStore(database, old)  # e.g. an API process still on the old embedder
        await asyncio.wait_for(
            store.update(alice, edited.id, content="The deploy key moved to vault B."), 5
        )
        await asyncio.wait_for(store.update(alice, retagged.id, importance=0.9), 5)
    finally:
        new.release.set()
    assert await batch == 1  # only the entry whose content is unchanged was written
    assert new.calls == [["The deploy key lives in vault A.", "Backups run nightly."]]

    # The edit survived: its content and its own (old-embedder) vector, not one of vault A.
    got = await MemoryStore(database, None).get(alice, edited.id, count_access=False)
    assert got is not None and got.content == "The deploy key moved to vault B."
    assert (got.embedder, got.embedding_dim) == ("offline:hash-v1", 256)
    assert await distance_to(database, edited.id, got.content, 256) == pytest.approx(0, abs=1e-6)
    # The importance-only edit did not stop the write (the vector depends on content only).
    other = await MemoryStore(database, None).get(alice, retagged.id, count_access=False)
    assert other is not None and other.importance == 0.9 and other.embedder == "test:gated"

    # The edited entry is still stale, so the next batch embeds its new content.
    new.calls.clear()
    assert await reembed_pending(database, alice, new) == 1
    assert new.calls == [["The deploy key moved to vault B."]]
    assert await embedders_of(database) == [("test:gated", 768)] * 2
    assert await distance_to(database, edited.id, got.content, 768) == pytest.approx(0, abs=1e-6)


async def test_a_deleted_entry_is_not_resurrected(database: Database, alice: Principal) -> None:
    [entry] = await MemoryStore(database, OfflineEmbedder()).create(alice, "short-lived")
    new = GatedEmbedder()
    batch = asyncio.create_task(reembed_pending(database, alice, new))
    try:
        await asyncio.wait_for(new.entered.wait(), 5)
        assert await asyncio.wait_for(MemoryStore(database, None).delete(alice, entry.id), 5)
    finally:
        new.release.set()
    assert await batch == 0
    assert await embedders_of(database) == []


async def test_concurrent_workers_embed_each_entry_once(
    db_url: str, database: Database, alice: Principal, mallory: Principal
) -> None:
    for note in NOTES:
        await MemoryStore(database, OfflineEmbedder()).create(alice, note)
    await MemoryStore(database, OfflineEmbedder()).create(mallory, "Mallory's car note.")
    new = GatedEmbedder()
    other_process = Database(db_url)  # its own pool, as another worker process would have
    try:
        first = asyncio.create_task(reembed_pending(database, None, new, batch=10))
        await asyncio.wait_for(new.entered.wait(), 5)  # first worker: inside acme's embed call
        new.entered.clear()
        second = asyncio.create_task(reembed_pending(other_process, None, new, batch=10))
        await asyncio.wait_for(new.entered.wait(), 5)  # second worker: skipped acme, took evil
        new.release.set()
        assert sorted(await asyncio.gather(first, second)) == [1, 5]
        third = await reembed_pending(other_process, None, new, batch=10)
    finally:
        new.release.set()
        await other_process.dispose()
    assert third == 0
    embedded = [t for call in new.calls for t in call]
    assert sorted(embedded) == sorted([*NOTES, "Mallory's car note."])  # each exactly once
    assert set(await embedders_of(database)) == {("test:gated", 768)}


async def test_a_busy_tenant_lock_is_skipped_and_released_after_failures(
    database: Database, alice: Principal
) -> None:
    await MemoryStore(database, OfflineEmbedder()).create(alice, "note")
    async with tenant_lock(database, "acme") as taken:
        assert taken
        async with tenant_lock(database, "acme") as again:
            assert not again  # held: another worker skips the tenant
        assert await reembed_pending(database, alice, OfflineEmbedder(768)) == 0
    from app.memory.embedders import EmbeddingError

    with pytest.raises(EmbeddingError):
        await reembed_pending(database, alice, FailingEmbedder("test:down", 768))
    assert await reembed_pending(database, alice, OfflineEmbedder(768)) == 1  # lock was released
