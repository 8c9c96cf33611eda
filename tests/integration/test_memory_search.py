"""Hybrid search on the real Postgres: which side wins, weights, MMR, index use, filters."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import text

from app.auth.principal import Principal
from app.db.engine import Database
from app.db.models import Agent
from app.memory.embedders import Embedder, OfflineEmbedder
from app.memory.ranking import Weights
from app.memory.search import (
    CANDIDATES,
    SearchResult,
    search_memories,
    vector_literal,
)
from app.memory.store import MemoryStore
from tests.integration.memory_support import ConceptEmbedder, FailingEmbedder

INCIDENT = (
    "Incident 2024-03: checkout failed with ERR-4471 after the payment gateway rotated its TLS "
    "certificate; the fix was to reload the trust store on every web node, then replay the "
    "queued orders from the dead-letter queue."
)
CORPUS = [
    INCIDENT,
    "ERR-4470 means the cart service timed out.",
    "ERR 4417 is a retired code.",
    "Error codes 4470-4479 are reserved for checkout.",
    "PostgreSQL replication lag alerts fire when the standby is more than 30 seconds behind.",
    "Our staging database password rotates every Monday at noon.",
    "The team prefers tabs over spaces in Go code.",
]


async def store_all(
    database: Database, who: Principal, embedder: Embedder, texts: list[str], **kw: Any
) -> list[UUID]:
    store = MemoryStore(database, embedder)
    return [(await store.create(who, t, **kw))[0].id for t in texts]


async def search(
    database: Database, who: Principal, embedder: Embedder, query: str, **kw: Any
) -> list[SearchResult]:
    return (await search_memories(database, who, embedder, query, **kw)).results


def contents(results: list[SearchResult]) -> list[str]:
    return [r.record.content for r in results]


async def test_full_text_wins_on_an_exact_rare_keyword(
    database: Database, alice: Principal
) -> None:
    embedder = OfflineEmbedder()
    await store_all(database, alice, embedder, CORPUS)
    results = await search(database, alice, embedder, "ERR-4471", limit=5)
    top = results[0]
    assert top.record.content == INCIDENT
    assert top.why["textRank"] == 1
    # the lexical vectors prefer the short look-alike codes; only full text knows the exact one
    assert top.why["vectorRank"] > 1
    nearest = next(r for r in results if r.why["vectorRank"] == 1)
    assert nearest.record.content != INCIDENT and nearest.why["textRank"] is None
    assert top.why["rrf"] > nearest.why["rrf"]


async def test_vector_wins_when_full_text_misses_a_misspelling(
    database: Database, alice: Principal
) -> None:
    embedder = OfflineEmbedder()
    await store_all(database, alice, embedder, CORPUS)
    results = await search(database, alice, embedder, "postgersql replication", limit=3)
    top = results[0]
    assert top.record.content.startswith("PostgreSQL replication")
    assert top.why["textRank"] is None  # websearch_to_tsquery finds nothing for the typo
    assert top.why["vectorRank"] == 1 and top.why["vectorSimilarity"] > 0.1


async def test_vector_wins_on_synonyms_with_a_semantic_embedder(
    database: Database, alice: Principal
) -> None:
    embedder = ConceptEmbedder()
    await store_all(
        database,
        alice,
        embedder,
        [
            "Car park passes are in the top drawer.",
            "The automobile needs servicing before the road trip in May.",
            "Repair café opens on Saturday mornings.",
            "The dog walker comes on Tuesdays.",
            "Invoices are due on the 5th of each month.",
        ],
    )
    results = await search(database, alice, embedder, "car repair", limit=3)
    assert results[0].record.content.startswith("The automobile needs servicing")
    assert all(r.why["textRank"] is None for r in results)
    assert results[0].why["vectorRank"] == 1


TWINS = ["Project phoenix launch checklist: alpha.", "Project phoenix launch checklist: omega."]


async def test_importance_changes_the_order(database: Database, alice: Principal) -> None:
    embedder = OfflineEmbedder()
    ids = await store_all(database, alice, embedder, [*TWINS, *CORPUS])
    query = "project phoenix launch checklist"
    before = contents(await search(database, alice, embedder, query, limit=2))
    first, second = (ids[TWINS.index(c)] for c in before)
    store = MemoryStore(database, embedder)
    await store.update(alice, first, importance=0.05)
    await store.update(alice, second, importance=1.0)
    after = await search(database, alice, embedder, query, limit=2)
    assert contents(after) == before[::-1]
    assert after[0].why["importanceWeight"] == 1.0
    assert after[1].why["importanceWeight"] == pytest.approx(0.525)


async def test_recency_changes_the_order(database: Database, alice: Principal) -> None:
    embedder = OfflineEmbedder()
    ids = await store_all(database, alice, embedder, [*TWINS, *CORPUS])
    query = "project phoenix launch checklist"
    before = contents(await search(database, alice, embedder, query, limit=2))
    async with database.owner() as s:
        await s.execute(
            text(
                "UPDATE agent_memory_entries SET updated_at = now() - interval '365 days' WHERE id = :id"
            ),
            {"id": ids[TWINS.index(before[0])]},
        )
    after = await search(database, alice, embedder, query, limit=2)
    assert contents(after) == before[::-1]
    old = after[1].why
    assert old["ageDays"] == pytest.approx(365, abs=0.01)
    assert old["recencyWeight"] == pytest.approx(0.7, abs=0.001)  # 1 - 0.3 + 0.3 * 0.5**(365/30)


async def test_mmr_removes_near_duplicates(database: Database, alice: Principal) -> None:
    embedder = OfflineEmbedder()
    dupes = [
        "Staging database password rotates every Monday at noon.",
        "Staging database password rotates every Monday at noon UTC.",
    ]
    other = (
        "Staging database backups run nightly at two, are encrypted with the ops key and are "
        "kept for thirty days."
    )
    await store_all(database, alice, embedder, [*dupes, other, *CORPUS[:5]])
    relevance_only = await search(
        database, alice, embedder, "staging database", limit=2, weights=Weights(mmr_lambda=1.0)
    )
    assert sorted(contents(relevance_only)) == sorted(dupes)
    diverse = await search(database, alice, embedder, "staging database", limit=2)
    assert contents(diverse)[0] in dupes and contents(diverse)[1] == other
    assert [r.why["mmrPosition"] for r in diverse] == [1, 2]
    assert diverse[1].why["mmrMaxSimilarity"] < 0.9


async def _index_scans(
    database: Database, who: Principal, params: dict[str, Any], setup: str
) -> dict[str, int]:
    """Scans of each memory index while the candidate function runs once (this transaction)."""
    async with database.tenant(who) as s:
        await s.execute(text(setup))  # tiny table: force the planner off sequential scans
        await s.execute(CANDIDATES, params)
        rows = await s.execute(
            text(
                "SELECT indexrelid::regclass::text AS name, pg_stat_get_xact_numscans(indexrelid) "
                "AS scans FROM pg_index WHERE indrelid = 'agent_memory_entries'::regclass"
            )
        )
        return {r.name: r.scans for r in rows}


async def test_the_candidate_function_uses_the_hnsw_and_gin_indexes(
    database: Database, alice: Principal
) -> None:
    # Under RLS the GIN index could not serve `@@` (not leakproof); the definer function can.
    embedder = OfflineEmbedder()
    await store_all(database, alice, embedder, CORPUS)
    qvec = vector_literal((await embedder.embed(["replication"], "query"))[0])
    params = {
        "query": "replication",
        "qvec": qvec,
        "embedder": embedder.name,
        "dim": 256,
        "candidates": 5,
        "ef_search": 100,
        "agent_id": None,
        "tags": [],
        "sync_commit": "on",
    }
    scans = await _index_scans(database, alice, params, "SET LOCAL enable_seqscan = off")
    assert scans["agent_memory_entries_hnsw_256"] >= 1, scans
    # The text side: with enough of the tenant's rows the planner prefers the GIN index by itself.
    async with database.owner() as s:
        await s.execute(
            text(
                "INSERT INTO agent_memory_entries (tenant_id, content) "
                "SELECT 'acme', 'filler note ' || n FROM generate_series(1, 2000) n"
            )
        )
        await s.execute(text("ANALYZE agent_memory_entries"))
    scans = await _index_scans(database, alice, params | {"qvec": None}, "SELECT 1")
    assert scans["agent_memory_entries_tsv"] >= 1, list(scans.items())


async def test_search_counts_access(database: Database, alice: Principal) -> None:
    embedder = OfflineEmbedder()
    await store_all(database, alice, embedder, CORPUS)
    first = await search(database, alice, embedder, "staging database password", limit=1)
    assert first[0].record.access_count == 1 and first[0].record.last_accessed_at is not None
    again = await search(database, alice, embedder, "staging database password", limit=1)
    assert again[0].record.access_count == 2


async def test_failing_embedder_falls_back_to_full_text(
    database: Database, alice: Principal
) -> None:
    await store_all(database, alice, OfflineEmbedder(), CORPUS)
    outcome = await search_memories(database, alice, FailingEmbedder(), "staging database")
    assert not outcome.vector_search
    assert [r.record.content for r in outcome.results] == [CORPUS[5]]
    # stored while the provider is down: kept without a vector, found by text
    stored = await MemoryStore(database, FailingEmbedder()).create(alice, "Fallback storage note.")
    assert stored[0].embedder is None and stored[0].embedding_dim is None
    found = await search(database, alice, OfflineEmbedder(), "fallback storage")
    assert found[0].record.id == stored[0].id and found[0].why["vectorRank"] is None


async def test_tag_and_agent_filters(database: Database, alice: Principal) -> None:
    async with database.tenant(alice) as s:
        agents = [Agent(tenant_id="acme", name=n) for n in ("ops", "sales")]
        s.add_all(agents)
        await s.flush()
        ops, sales = agents[0].id, agents[1].id
    embedder = OfflineEmbedder()
    store = MemoryStore(database, embedder)
    await store.create(alice, "Deploy window is Tuesday.", tags=["ops", "deploy"], agent_id=ops)
    await store.create(alice, "Deploy freeze in December.", tags=["ops"], agent_id=sales)
    await store.create(alice, "Deploy notes are shared.", tags=["deploy"])
    q = "deploy"
    assert len(await search(database, alice, embedder, q)) == 3
    tagged = await search(database, alice, embedder, q, tags=["ops", "deploy"])
    assert contents(tagged) == ["Deploy window is Tuesday."]
    mine = await search(database, alice, embedder, q, agent_id=ops)
    assert sorted(contents(mine)) == ["Deploy notes are shared.", "Deploy window is Tuesday."]


async def test_reads_do_not_wait_for_locked_rows(database: Database, alice: Principal) -> None:
    embedder = OfflineEmbedder()
    [entry_id] = await store_all(database, alice, embedder, [CORPUS[5]])
    async with database.tenant(alice) as s:  # e.g. a re-embed batch holding the row
        await s.execute(
            text("SELECT 1 FROM agent_memory_entries WHERE id = :id FOR UPDATE"), {"id": entry_id}
        )
        results = await asyncio.wait_for(
            search(database, alice, embedder, "staging database"), timeout=5
        )
        assert results[0].record.id == entry_id and results[0].record.access_count == 0
    again = await search(database, alice, embedder, "staging database")
    assert again[0].record.access_count == 1
