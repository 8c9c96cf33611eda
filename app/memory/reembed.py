"""Background re-embedding: entries whose vector is not the active embedder's get a new one.

An entry is *stale* when its `(embedder, embedding_dim)` differs from the active embedder's
(`MEMORY_EMBEDDER` / `MEMORY_EMBEDDING_DIM` changed, or the embedder failed when it was stored).
Until it is re-embedded, search finds it by full text only — the vector side only ever compares
vectors of the active embedder.

* `reembed_pending(db, principal, embedder, batch)`: one batch of one tenant (or, with
  `principal=None`, one batch of every tenant that has stale entries); returns how many.
* `run_reembed(db, embedder, stop)`: the loop to run as an asyncio task in a long-lived process
  (the worker): batches until nothing is stale, then a check every `interval` seconds; stops when
  `stop` is set.

Finding the tenants uses `Database.queue()` (role agent_runtime_worker, which may read only
`tenant_id`, `embedder`, `embedding_dim` of memory entries — migration 0002); each batch then runs
as that tenant through `Database.tenant()`, in three steps, so that no transaction and no row lock
is held while the provider embeds (which may take up to 30 s):

1. a short transaction reads the ids, content and current `(embedder, embedding_dim)` of up to
   `batch` stale entries (no locks);
2. the contents are embedded with no transaction open;
3. a short transaction writes each vector only where the row still has that exact content and
   that old `(embedder, embedding_dim)`. An entry edited meanwhile (its new content was embedded
   by the edit, or will be by the next batch) or deleted is left alone: a vector of old content
   never overwrites a concurrent edit. An edit of tags or importance only does not block the write
   (the vector depends on the content alone).

Several worker processes may run `run_reembed` at once. Step 3 alone keeps that correct (the
second writer of an entry finds it no longer stale and writes nothing); to also keep them from
paying the provider twice for the same entries, each tenant's batch runs under a session-level
advisory lock (`pg_try_advisory_lock`, per tenant) taken on a connection in autocommit mode — so it
is held across the embed call without any open transaction — and a worker that finds a tenant's
lock taken moves on to the next tenant. `updated_at` is left alone: re-embedding does not make an
entry "recent".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import structlog
from sqlalchemy import ColumnElement, func, or_, select, text

from app.auth.principal import Principal
from app.db.engine import Database
from app.db.models import MemoryEntry
from app.memory.embedders import Embedder, EmbeddingError
from app.memory.search import vector_literal

log = structlog.get_logger(__name__)

REEMBED_USER = "system:memory-reembed"
"""The `sub` of the principal the re-embed task acts as within each tenant."""

LOCK_PREFIX = "agent-runtime:memory-reembed:"
"""Prefix of the advisory-lock key of a tenant's re-embedding (hashed with the tenant id)."""

_STALE_TENANTS = text(
    "SELECT DISTINCT tenant_id FROM agent_memory_entries "
    "WHERE embedder IS DISTINCT FROM :embedder OR embedding_dim IS DISTINCT FROM :dim "
    "ORDER BY tenant_id"
)
_TRY_LOCK = text("SELECT pg_try_advisory_lock(hashtextextended(:key, 0))")
_UNLOCK = text("SELECT pg_advisory_unlock(hashtextextended(:key, 0))")

# Step 3: one statement for the batch; a row is written only if it is still what was embedded.
_WRITE_IF_UNCHANGED = text("""
UPDATE agent_memory_entries AS e
SET embedding = CAST(v.embedding AS vector), embedder = :embedder, embedding_dim = :dim
FROM unnest(CAST(:ids AS uuid[]), CAST(:contents AS text[]), CAST(:old_embedders AS text[]),
            CAST(:old_dims AS integer[]), CAST(:vectors AS text[]))
     AS v(id, content, old_embedder, old_dim, embedding)
WHERE e.id = v.id
  AND e.content = v.content
  AND e.embedder IS NOT DISTINCT FROM v.old_embedder
  AND e.embedding_dim IS NOT DISTINCT FROM v.old_dim
RETURNING e.id
""")


def _stale(embedder: Embedder) -> ColumnElement[bool]:
    return or_(
        MemoryEntry.embedder.is_distinct_from(embedder.name),
        MemoryEntry.embedding_dim.is_distinct_from(embedder.dimension),
    )


async def stale_tenants(db: Database, embedder: Embedder) -> list[str]:
    """Tenants having at least one entry not embedded by `embedder`."""
    async with db.queue() as s:
        rows = await s.execute(
            _STALE_TENANTS, {"embedder": embedder.name, "dim": embedder.dimension}
        )
        return [r.tenant_id for r in rows]


@contextlib.asynccontextmanager
async def tenant_lock(db: Database, tenant_id: str) -> AsyncIterator[bool]:
    """Try to take the tenant's re-embed lock; yields whether it was taken (never waits).

    A session-level advisory lock on a dedicated autocommit connection: held while the batch is
    embedded, yet no transaction stays open. Released on exit; if releasing fails, the connection
    is discarded (closing it releases the lock server-side) rather than returned to the pool.
    """
    key = {"key": LOCK_PREFIX + tenant_id}
    async with db.engine.connect() as raw:
        conn = await raw.execution_options(isolation_level="AUTOCOMMIT")
        taken = bool(await conn.scalar(_TRY_LOCK, key))
        try:
            yield taken
        finally:
            if taken:
                try:
                    await conn.execute(_UNLOCK, key)
                except BaseException:
                    await conn.invalidate()
                    raise


async def _reembed_tenant(
    db: Database, principal: Principal, embedder: Embedder, batch: int
) -> int:
    async with tenant_lock(db, principal.tenant_id) as taken:
        if not taken:  # another worker is re-embedding this tenant right now
            return 0
        async with db.tenant(principal) as s:  # 1. read (no locks)
            rows = (
                await s.execute(
                    select(
                        MemoryEntry.id,
                        MemoryEntry.content,
                        MemoryEntry.embedder,
                        MemoryEntry.embedding_dim,
                    )
                    .where(_stale(embedder))
                    .order_by(MemoryEntry.created_at, MemoryEntry.id)
                    .limit(batch)
                )
            ).all()
        if not rows:
            return 0
        vectors = await embedder.embed([r.content for r in rows], "document")  # 2. no transaction
        if len(vectors) != len(rows):
            raise EmbeddingError(f"{embedder.name} returned {len(vectors)} vectors for {len(rows)}")
        params: dict[str, Any] = {
            "embedder": embedder.name,
            "dim": embedder.dimension,
            "ids": [r.id for r in rows],
            "contents": [r.content for r in rows],
            "old_embedders": [r.embedder for r in rows],
            "old_dims": [r.embedding_dim for r in rows],
            "vectors": [vector_literal(v) for v in vectors],
        }
        async with db.tenant(principal) as s:  # 3. write where unchanged
            written: list[UUID] = list((await s.execute(_WRITE_IF_UNCHANGED, params)).scalars())
    if len(written) < len(rows):
        log.info(
            "memory re-embed skipped entries changed meanwhile",
            tenant=principal.tenant_id,
            skipped=len(rows) - len(written),
        )
    log.info(
        "memory re-embedded",
        tenant=principal.tenant_id,
        entries=len(written),
        embedder=embedder.name,
    )
    return len(written)


async def reembed_pending(
    db: Database, principal: Principal | None, embedder: Embedder, batch: int = 64
) -> int:
    """Re-embed up to `batch` stale entries of `principal`'s tenant (None: of each stale tenant).

    Returns the number of entries re-embedded (0: nothing was stale, or another worker is
    re-embedding the tenant right now). Entries edited while their batch was being embedded are
    skipped (still stale, taken by a later batch). A failing batch changes nothing;
    `EmbeddingError` is raised when nothing could be done (with `principal=None`, other tenants'
    batches still go ahead). An entry the provider always rejects stays stale and is retried each
    round (found by full text meanwhile).
    """
    if principal is not None:
        return await _reembed_tenant(db, principal, embedder, batch)
    done, failure = 0, None
    for tenant_id in await stale_tenants(db, embedder):
        who = Principal(user_id=REEMBED_USER, tenant_id=tenant_id, role="service")
        try:
            done += await _reembed_tenant(db, who, embedder, batch)
        except EmbeddingError as exc:  # one tenant's failing batch must not stall the others
            log.warning("memory re-embed failed", tenant=tenant_id, error=str(exc))
            failure = exc
    if failure is not None and done == 0:
        raise failure
    return done


@dataclass(frozen=True, slots=True)
class EmbeddingStatus:
    """How much of a tenant's memory the active embedder has embedded."""

    embedder: str
    dimension: int
    total: int
    current: int

    @property
    def pending(self) -> int:
        """Entries waiting for the background re-embed."""
        return self.total - self.current


async def embedding_status(
    db: Database, principal: Principal, embedder: Embedder
) -> EmbeddingStatus:
    """Counts of the tenant's entries, in total and embedded by `embedder`."""
    current = (MemoryEntry.embedder == embedder.name) & (
        MemoryEntry.embedding_dim == embedder.dimension
    )
    async with db.tenant(principal) as s:
        row = (
            await s.execute(
                select(func.count(), func.count().filter(current)).select_from(MemoryEntry)
            )
        ).one()
    return EmbeddingStatus(embedder.name, embedder.dimension, total=row[0], current=row[1])


async def run_reembed(
    db: Database,
    embedder: Embedder,
    stop: asyncio.Event,
    *,
    batch: int = 64,
    interval_seconds: float = 60.0,
) -> None:
    """Keep every tenant's memory embedded by `embedder` until `stop` is set.

    Runs batches back to back while there is stale work; otherwise (or after a failure, which is
    logged) waits `interval_seconds` or until `stop`. Meant for `asyncio.create_task` in the
    worker process, e.g. `run_reembed(db, embedder_from_settings(s), stop,
    batch=s.memory_reembed_batch, interval_seconds=s.memory_reembed_interval_seconds)`.
    """
    while not stop.is_set():
        try:
            done = await reembed_pending(db, None, embedder, batch)
        except EmbeddingError as exc:
            log.warning("memory re-embed failed; retrying later", error=str(exc))
            done = 0
        except Exception:  # a database hiccup must not end the task for good
            log.exception("memory re-embed crashed; retrying later")
            done = 0
        if done:
            await asyncio.sleep(0)  # let others run between batches
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_seconds)
