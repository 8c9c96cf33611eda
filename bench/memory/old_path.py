"""The A side of the benchmark: hybrid search as it ran before migration 0022 (commit 9acb540).

One statement under RLS (`Database.tenant`): the HNSW vector side and the full-text side, which
RLS kept off the GIN index (`@@` is not leakproof), fused like today; then the same ranking,
and the access update and record fetch of today's store (`touch`, `fetch_records`). Kept here only
to time old against new on the same data in the same run.
"""

from __future__ import annotations

from sqlalchemy import Row, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.principal import Principal
from app.db.engine import Database
from app.memory.embedders import Embedder
from app.memory.ranking import Candidate, Weights, rank
from app.memory.search import vector_literal
from app.memory.store import fetch_records, touch

OLD_CANDIDATES = """
WITH vec AS MATERIALIZED (
  SELECT id, embedding::vector({dim}) <=> CAST(:qvec AS vector({dim})) AS distance,
         importance, updated_at, embedding
  FROM agent_memory_entries
  WHERE embedding_dim = {dim} AND embedder = :embedder
  ORDER BY embedding::vector({dim}) <=> CAST(:qvec AS vector({dim}))
  LIMIT :candidates
), vec_ranked AS (
  SELECT *, row_number() OVER (ORDER BY distance, id) AS vector_rank FROM vec
), txt AS MATERIALIZED (
  SELECT e.id, ts_rank_cd(e.content_tsv, q.query, 1) AS text_score, e.importance, e.updated_at,
         CASE WHEN e.embedder = :embedder AND e.embedding_dim = {dim} THEN e.embedding END
           AS embedding
  FROM agent_memory_entries e, websearch_to_tsquery('english', :query) AS q(query)
  WHERE e.content_tsv @@ q.query
  ORDER BY text_score DESC, e.id
  LIMIT :candidates
), txt_ranked AS (
  SELECT *, row_number() OVER (ORDER BY text_score DESC, id) AS text_rank FROM txt
)
SELECT coalesce(v.id, t.id) AS id, v.vector_rank, 1 - v.distance AS vector_similarity,
       t.text_rank, t.text_score, coalesce(v.importance, t.importance) AS importance,
       extract(epoch FROM now() - coalesce(v.updated_at, t.updated_at)) / 86400.0 AS age_days,
       coalesce(v.embedding, t.embedding)::text AS embedding
FROM vec_ranked v FULL JOIN txt_ranked t ON t.id = v.id"""


async def configure_hnsw(session: AsyncSession, ef_search: int) -> None:
    """Per-transaction pgvector settings, as the app set them before 0022."""
    await session.execute(
        text(
            "SELECT set_config('hnsw.ef_search', :ef, true), "
            "set_config('hnsw.iterative_scan', 'relaxed_order', true)"
        ),
        {"ef": str(ef_search)},
    )


async def old_candidates(
    db: Database, who: Principal, embedder: Embedder, query: str, candidates: int, ef: int
) -> list[Row]:
    """The old candidate rows (same columns as `agent_runtime_memory_candidates`)."""
    qvec = (await embedder.embed([query], "query"))[0]
    params = {
        "query": query,
        "embedder": embedder.name,
        "candidates": candidates,
        "qvec": vector_literal(qvec),
    }
    async with db.tenant(who) as s:
        await configure_hnsw(s, ef)
        sql = text(OLD_CANDIDATES.format(dim=embedder.dimension))
        return list((await s.execute(sql, params)).all())


async def old_search(
    db: Database, who: Principal, embedder: Embedder, query: str, candidates: int, ef: int
) -> list[str]:
    """The whole old `search_memories` (limit 10, default weights); the result ids in order."""
    qvec = (await embedder.embed([query], "query"))[0]
    params = {
        "query": query,
        "embedder": embedder.name,
        "candidates": candidates,
        "qvec": vector_literal(qvec),
    }
    async with db.tenant(who) as s:
        await configure_hnsw(s, ef)
        rows = (await s.execute(text(OLD_CANDIDATES.format(dim=embedder.dimension)), params)).all()
        found = [
            Candidate(
                id=r.id,
                vector_rank=r.vector_rank,
                vector_similarity=r.vector_similarity,
                text_rank=r.text_rank,
                text_score=r.text_score,
                importance=r.importance,
                age_days=float(r.age_days),
                embedding=None
                if r.embedding is None
                else [float(v) for v in r.embedding[1:-1].split(",")],
            )
            for r in rows
        ]
        ranked = rank(found, Weights(), 10)
        ids = [r.candidate.id for r in ranked]
        await touch(s, ids)
        records = await fetch_records(s, ids)
    return [str(i) for i in ids if i in records]
