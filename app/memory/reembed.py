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
as that tenant through `Database.tenant()`. Batches lock their rows `FOR UPDATE SKIP LOCKED`, so
several workers share the work without embedding an entry twice. `updated_at` is left alone:
re-embedding does not make an entry "recent".
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import structlog
from sqlalchemy import ColumnElement, func, or_, select, text, update

from app.auth.principal import Principal
from app.db.engine import Database
from app.db.models import MemoryEntry
from app.memory.embedders import Embedder, EmbeddingError

log = structlog.get_logger(__name__)

REEMBED_USER = "system:memory-reembed"
"""The `sub` of the principal the re-embed task acts as within each tenant."""

_STALE_TENANTS = text(
    "SELECT DISTINCT tenant_id FROM agent_memory_entries "
    "WHERE embedder IS DISTINCT FROM :embedder OR embedding_dim IS DISTINCT FROM :dim "
    "ORDER BY tenant_id"
)


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


async def _reembed_tenant(
    db: Database, principal: Principal, embedder: Embedder, batch: int
) -> int:
    async with db.tenant(principal) as s:
        rows = (
            await s.execute(
                select(MemoryEntry.id, MemoryEntry.content)
                .where(_stale(embedder))
                .order_by(MemoryEntry.created_at, MemoryEntry.id)
                .limit(batch)
                .with_for_update(skip_locked=True)
            )
        ).all()
        if not rows:
            return 0
        vectors = await embedder.embed([r.content for r in rows], "document")
        await s.execute(
            update(MemoryEntry),
            [
                {
                    "id": r.id,
                    "embedding": vector,
                    "embedder": embedder.name,
                    "embedding_dim": embedder.dimension,
                }
                for r, vector in zip(rows, vectors, strict=True)
            ],
        )
    log.info(
        "memory re-embedded", tenant=principal.tenant_id, entries=len(rows), embedder=embedder.name
    )
    return len(rows)


async def reembed_pending(
    db: Database, principal: Principal | None, embedder: Embedder, batch: int = 64
) -> int:
    """Re-embed up to `batch` stale entries of `principal`'s tenant (None: of each stale tenant).

    Returns the number of entries re-embedded (0: nothing was stale, or all of it is locked by
    another worker). A failing batch changes nothing; `EmbeddingError` is raised when nothing
    could be done (with `principal=None`, other tenants' batches still go ahead). An entry the
    provider always rejects stays stale and is retried each round (found by full text meanwhile).
    """
    if principal is not None:
        return await _reembed_tenant(db, principal, embedder, batch)
    done, failure = 0, None
    for tenant_id in await stale_tenants(db, embedder):
        who = Principal(user_id=REEMBED_USER, tenant_id=tenant_id)
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
