"""Hybrid memory search: HNSW vector candidates + full-text candidates, fused and explained.

One statement gathers the candidates, inside `Database.tenant(principal)` (RLS):

* vector side: the `limit`-nearest entries by cosine distance, written exactly like the partial
  HNSW index of the active embedder's dimension N — `embedding::vector(N) <=> q` with
  `WHERE embedding_dim = N AND embedder = :embedder` — so the index is used and vectors of other
  embedders (other models, or the same model at another dimension) are never compared;
  `hnsw.iterative_scan = relaxed_order` keeps scanning when RLS or filters drop rows, and
  `hnsw.ef_search` is set per transaction;
* text side: `websearch_to_tsquery('english', query)` matches ranked by `ts_rank_cd` with
  normalisation 1 (divided by 1 + log(length), so a long chunk does not win by size alone);
  entries not yet re-embedded by the active embedder are found here only.

`ranking.rank` then fuses (RRF), weights (importance, recency) and diversifies (MMR); see there.
The returned entries count as accessed (access_count, last_accessed_at).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.principal import Principal
from app.db.engine import Database
from app.memory.embedders import Embedder, EmbeddingError
from app.memory.ranking import Candidate, Ranked, Weights, rank
from app.memory.store import MemoryRecord, fetch_records, touch

log = structlog.get_logger(__name__)

MAX_LIMIT = 50

_FILTERS = {
    "agent": "AND (agent_id = :agent_id OR agent_id IS NULL)",
    "tags": "AND tags @> CAST(:tags AS text[])",
}

# Each side reads the columns ranking needs while it visits the row, so no join back is needed.
_TEXT_SIDE = """
txt AS MATERIALIZED (
  SELECT e.id, ts_rank_cd(e.content_tsv, q.query, 1) AS text_score, e.importance, e.updated_at,
         CASE WHEN e.embedder = :embedder AND e.embedding_dim = {dim} THEN e.embedding END
           AS embedding
  FROM agent_memory_entries e, websearch_to_tsquery('english', :query) AS q(query)
  WHERE e.content_tsv @@ q.query {filters}
  ORDER BY text_score DESC, e.id
  LIMIT :candidates
), txt_ranked AS (
  SELECT *, row_number() OVER (ORDER BY text_score DESC, id) AS text_rank FROM txt
)"""

_VECTOR_SIDE = """
vec AS MATERIALIZED (
  SELECT id, embedding::vector({dim}) <=> CAST(:qvec AS vector({dim})) AS distance,
         importance, updated_at, embedding
  FROM agent_memory_entries
  WHERE embedding_dim = {dim} AND embedder = :embedder {filters}
  ORDER BY embedding::vector({dim}) <=> CAST(:qvec AS vector({dim}))
  LIMIT :candidates
), vec_ranked AS (
  SELECT *, row_number() OVER (ORDER BY distance, id) AS vector_rank FROM vec
)"""

_NO_VECTOR_SIDE = """
vec_ranked AS (
  SELECT NULL::uuid AS id, NULL::float8 AS distance, NULL::real AS importance,
         NULL::timestamptz AS updated_at, NULL::vector AS embedding, NULL::bigint AS vector_rank
  WHERE false
)"""

_FUSE = """
SELECT coalesce(v.id, t.id) AS id, v.vector_rank, 1 - v.distance AS vector_similarity,
       t.text_rank, t.text_score, coalesce(v.importance, t.importance) AS importance,
       extract(epoch FROM now() - coalesce(v.updated_at, t.updated_at)) / 86400.0 AS age_days,
       coalesce(v.embedding, t.embedding)::text AS embedding
FROM vec_ranked v FULL JOIN txt_ranked t ON t.id = v.id"""


def vector_sql(dim: int, *, agent: bool = False, tags: bool = False) -> str:
    """The vector-side query alone: nearest `:candidates` to `:qvec` among `:embedder`'s entries."""
    filters = _filters(agent=agent, tags=tags)
    vector_side = _VECTOR_SIDE.format(dim=int(dim), filters=filters)
    return "WITH " + vector_side + " SELECT * FROM vec"  # noqa: S608 (code-built, see above)


def text_sql(dim: int, *, agent: bool = False, tags: bool = False) -> str:
    """The text-side query alone: best `:candidates` full-text matches of `:query`."""
    text_side = _TEXT_SIDE.format(dim=int(dim), filters=_filters(agent=agent, tags=tags))
    return "WITH " + text_side + " SELECT * FROM txt_ranked"  # noqa: S608 (code-built)


def candidates_sql(
    dim: int, *, vector: bool = True, agent: bool = False, tags: bool = False
) -> str:
    """The whole candidate statement (dimension and filter switches are code, never input)."""
    filters = _filters(agent=agent, tags=tags)
    vector_side = _VECTOR_SIDE if vector else _NO_VECTOR_SIDE
    ctes = [
        vector_side.format(dim=int(dim), filters=filters),
        _TEXT_SIDE.format(dim=int(dim), filters=filters),
    ]
    return "WITH " + ",".join(ctes) + _FUSE


def _filters(*, agent: bool, tags: bool) -> str:
    return " ".join(f for k, f in _FILTERS.items() if {"agent": agent, "tags": tags}[k])


async def configure_hnsw(session: AsyncSession, ef_search: int) -> None:
    """Per-transaction pgvector settings: `hnsw.ef_search` and relaxed iterative scans."""
    await session.execute(
        text(
            "SELECT set_config('hnsw.ef_search', :ef, true), "
            "set_config('hnsw.iterative_scan', 'relaxed_order', true)"
        ),
        {"ef": str(ef_search)},
    )


def vector_literal(vector: list[float]) -> str:
    """pgvector's text form of a vector."""
    return "[" + ",".join(repr(float(v)) for v in vector) + "]"


def _parse_vector(raw: str | None) -> list[float] | None:
    return None if raw is None else list(map(float, raw[1:-1].split(",")))


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
    sql = candidates_sql(
        embedder.dimension, vector=qvec is not None, agent=agent_id is not None, tags=bool(tags)
    )
    params: dict[str, Any] = {
        "query": query,
        "embedder": embedder.name,
        "candidates": max(candidates, limit),
        "agent_id": agent_id,
        "tags": tags or [],
    }
    if qvec is not None:
        params["qvec"] = vector_literal(qvec)
    async with db.tenant(principal) as s:
        await configure_hnsw(s, max(ef_search, limit))
        rows = (await s.execute(text(sql), params)).all()
        found = [
            Candidate(
                id=r.id,
                vector_rank=r.vector_rank,
                vector_similarity=r.vector_similarity,
                text_rank=r.text_rank,
                text_score=r.text_score,
                importance=r.importance,
                age_days=float(r.age_days),
                embedding=_parse_vector(r.embedding),
            )
            for r in rows
        ]
        ranked = rank(found, weights or Weights(), limit)
        ids = [r.candidate.id for r in ranked]
        if count_access:
            await touch(s, ids)
        records = await fetch_records(s, ids)
    results = [
        SearchResult(record=records[r.candidate.id], score=round(r.score, 8), why=explain(r))
        for r in ranked
        if r.candidate.id in records
    ]
    return SearchOutcome(results=results, embedder=embedder.name, vector_search=qvec is not None)
