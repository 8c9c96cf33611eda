"""Hybrid memory search: HNSW vector candidates + full-text candidates, fused and explained.

The candidates come from one call of `agent_runtime_memory_candidates` (migration 0022), a
`SECURITY DEFINER` function that reads the tenant from the request's claims itself, inside
`Database.tenant(principal)`:

* vector side: the `candidates`-nearest entries by cosine distance, written exactly like the
  partial HNSW index of the active embedder's dimension N (`embedding::vector(N) <=> q` with
  `embedding_dim = N AND embedder = :embedder`), so the index is used and vectors of other
  embedders (other models, or the same model at another dimension) are never compared;
  `hnsw.iterative_scan = relaxed_order` keeps scanning when the tenant or filters drop rows, and
  `hnsw.ef_search` is set per transaction;
* text side: `websearch_to_tsquery('english', query)` matches ranked by `ts_rank_cd` with
  normalisation 1 (divided by 1 + log(length), so a long chunk does not win by size alone);
  entries not yet re-embedded by the active embedder are found here only.

Why a definer function: under RLS the non-leakproof `@@` is evaluated after the tenant policy,
so the GIN index could not serve the text side (every search ranked all of the tenant's rows),
and the planner could not see which tenant (big: HNSW; small: btree) it plans for. The function
bypasses RLS and applies the policy's one condition (tenant = the claims' tenant) itself; see
docs/memory.md.

`ranking.rank` then fuses (RRF), weights (importance, recency) and diversifies (MMR); see there.
The returned entries count as accessed (access_count, last_accessed_at), under RLS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

import structlog
from sqlalchemy import text

from app.auth.principal import Principal
from app.db.engine import Database
from app.memory.embedders import Embedder, EmbeddingError
from app.memory.ranking import Candidate, Ranked, Weights, rank
from app.memory.store import MemoryRecord, fetch_records, fetch_touched

log = structlog.get_logger(__name__)

MAX_LIMIT = 50

CANDIDATES = text(
    "SELECT c.* FROM set_config('synchronous_commit', :sync_commit, true) AS sc, "
    "public.agent_runtime_memory_candidates(CAST(:query AS text), "
    "CAST(:qvec AS text), CAST(:embedder AS text), CAST(:dim AS integer), "
    "CAST(:agent_id AS uuid), CAST(:tags AS text[]), CAST(:candidates AS integer), "
    "CAST(:ef_search AS integer)) AS c"
)
"""The candidate rows (id, vector_rank, vector_similarity, text_rank, text_score, importance,
age_days, embedding as real[]) of the claims' tenant; `:qvec` NULL skips the vector side. Sets
`hnsw.ef_search` (and relaxed iterative scans) for the rest of the transaction, and
`synchronous_commit` to `:sync_commit`: the only write of a search is the best-effort access
count (`fetch_touched`), whose commit need not wait for the WAL flush (a crash right after may lose
the count, never an entry)."""


def vector_literal(vector: list[float]) -> str:
    """pgvector's text form of a vector."""
    return "[" + ",".join(repr(float(v)) for v in vector) + "]"


@dataclass(frozen=True, slots=True)
class SearchResult:
    """A found entry, its final score and the components of its rank."""

    record: MemoryRecord
    score: float
    why: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    """The results, and whether the vector side took part (False when the embedder failed)."""

    results: list[SearchResult]
    embedder: str
    vector_search: bool


def explain(r: Ranked) -> dict[str, Any]:
    """The `why` of a result: every number that went into its position (camelCase)."""
    c = r.candidate

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 6)

    return {
        "vectorRank": c.vector_rank,
        "vectorSimilarity": rounded(c.vector_similarity),
        "textRank": c.text_rank,
        "textScore": rounded(c.text_score),
        "rrf": rounded(r.rrf),
        "importanceWeight": rounded(r.importance_factor),
        "recencyWeight": rounded(r.recency_factor),
        "ageDays": rounded(c.age_days),
        "mmrPosition": r.mmr_position,
        "mmrMaxSimilarity": rounded(r.mmr_max_similarity),
    }


async def search_memories(
    db: Database,
    principal: Principal,
    embedder: Embedder,
    query: str,
    *,
    limit: int = 10,
    tags: list[str] | None = None,
    agent_id: UUID | None = None,
    candidates: int = 50,
    ef_search: int = 100,
    weights: Weights | None = None,
    count_access: bool = True,
) -> SearchOutcome:
    """The best `limit` entries for `query` (see the module docstring).

    `tags`: only entries carrying all of them. `agent_id`: that agent's entries and the shared
    (agent-less) ones.
    """
    limit = max(1, min(limit, MAX_LIMIT))
    qvec: list[float] | None
    try:
        qvec = (await embedder.embed([query], "query"))[0]
    except EmbeddingError as exc:
        log.warning("memory search without vectors", embedder=embedder.name, error=str(exc))
        qvec = None
    params: dict[str, Any] = {
        "query": query,
        "qvec": None if qvec is None else vector_literal(qvec),
        "embedder": embedder.name,
        "dim": embedder.dimension,
        "candidates": max(candidates, limit),
        "ef_search": max(ef_search, limit),
        "agent_id": agent_id,
        "tags": tags or [],
        "sync_commit": "off",
    }
    async with db.tenant(principal) as s:
        rows = (await s.execute(CANDIDATES, params)).all()
        found = [
            Candidate(
                id=r.id,
                vector_rank=r.vector_rank,
                vector_similarity=r.vector_similarity,
                text_rank=r.text_rank,
                text_score=r.text_score,
                importance=r.importance,
                age_days=float(r.age_days),
                embedding=r.embedding,
            )
            for r in rows
        ]
        ranked = rank(found, weights or Weights(), limit)
        ids = [r.candidate.id for r in ranked]
        records = await (fetch_touched if count_access else fetch_records)(s, ids)
    results = [
        SearchResult(record=records[r.candidate.id], score=round(r.score, 8), why=explain(r))
        for r in ranked
        if r.candidate.id in records
    ]
    return SearchOutcome(results=results, embedder=embedder.name, vector_search=qvec is not None)
