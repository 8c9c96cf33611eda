"""Memory entries: create (chunked, embedded), get, update, delete, list — each as one tenant.

Every verb opens `Database.tenant(principal)`, so RLS confines it to the principal's tenant: another
tenant's id is simply not found. Texts are embedded before the transaction opens (no connection is
held during a provider call). When the embedder fails, the entry is stored without a vector —
full-text search finds it at once and the background re-embed fills the vector in later.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import structlog
from sqlalchemy import Select, Text, cast, delete, func, insert, select, tuple_, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import UUID as PG_UUID
from sqlalchemy.ext.asyncio import AsyncSession

from app.agents.store import get_agent
from app.auth.principal import Principal
from app.core.errors import NotFoundError
from app.db.engine import Database
from app.db.models import AgentSession, MemoryEntry
from app.memory.chunking import chunk_text
from app.memory.embedders import Embedder, EmbedderConfigError, EmbeddingError
from app.sessions.store import get_session_by_key

log = structlog.get_logger(__name__)

MAX_TAGS = 32
MAX_TAG_CHARS = 64


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """A stored entry as the API and tools show it (no vector)."""

    id: UUID
    content: str
    tags: list[str]
    importance: float
    agent_id: UUID | None
    session_key: str | None
    document_id: UUID | None
    chunk_index: int | None
    embedder: str | None
    embedding_dim: int | None
    access_count: int
    last_accessed_at: datetime | None
    created_at: datetime
    updated_at: datetime

    def as_json(self) -> dict[str, Any]:
        """camelCase, JSON-ready (what the memory tools return)."""
        return {
            "id": str(self.id),
            "content": self.content,
            "tags": self.tags,
            "importance": self.importance,
            "agentId": str(self.agent_id) if self.agent_id else None,
            "sessionKey": self.session_key,
            "documentId": str(self.document_id) if self.document_id else None,
            "chunkIndex": self.chunk_index,
            "embedder": self.embedder,
            "embeddingDim": self.embedding_dim,
            "accessCount": self.access_count,
            "lastAccessedAt": _iso(self.last_accessed_at),
            "createdAt": _iso(self.created_at),
            "updatedAt": _iso(self.updated_at),
        }


def _iso(ts: datetime | None) -> str | None:
    return ts.isoformat() if ts is not None else None


@dataclass(frozen=True, slots=True)
class ListCursor:
    """Keyset position in the newest-first listing: `<createdAt ISO>_<id>`."""

    created_at: datetime
    id: UUID

    def encode(self) -> str:
        """The cursor as sent to clients."""
        return f"{self.created_at.isoformat()}_{self.id}"

    @classmethod
    def parse(cls, raw: str) -> ListCursor:
        """Inverse of `encode`; ValueError when malformed."""
        ts, sep, ident = raw.rpartition("_")
        if not sep:
            raise ValueError("expected <timestamp>_<id> (a nextCursor)")
        created = datetime.fromisoformat(ts)
        if created.tzinfo is None:
            raise ValueError("the cursor's timestamp has no time zone")
        try:  # e.g. year 1 at +14:00 is before year 1 in UTC: Postgres cannot take it
            created = created.astimezone(UTC)
        except OverflowError:
            raise ValueError("the cursor's timestamp is out of range") from None
        return cls(created, UUID(ident))


def clean_tags(tags: list[str]) -> list[str]:
    """Stripped, de-duplicated (first occurrence wins) tags; ValueError when invalid."""
    out: list[str] = []
    for tag in tags:
        tag = tag.strip()
        if not tag or len(tag) > MAX_TAG_CHARS or "\x00" in tag:
            raise ValueError(f"each tag must be 1-{MAX_TAG_CHARS} characters (got {tag!r})")
        if tag not in out:
            out.append(tag)
    if len(out) > MAX_TAGS:
        raise ValueError(f"at most {MAX_TAGS} tags")
    return out


def _record_select() -> Select[*tuple[Any, ...]]:
    e = MemoryEntry
    return select(
        e.id,
        e.content,
        e.tags,
        e.importance,
        e.agent_id,
        AgentSession.session_key,
        e.document_id,
        e.chunk_index,
        e.embedder,
        e.embedding_dim,
        e.access_count,
        e.last_accessed_at,
        e.created_at,
        e.updated_at,
    ).outerjoin(AgentSession, AgentSession.id == e.session_id)


def _id_list(ids: list[UUID]) -> Any:
    """`ids` as a joinable row source.

    Joined rather than `id IN (...)`: under RLS the planner cannot see which tenant the policy's
    `tenant_id = (SELECT ...)` means and estimates it small, so with `IN` it ANDs a bitmap of the
    whole tenant's (tenant_id, ...) index with the primary key's (15 ms at 100k entries); a join
    probes the primary key once per id.
    """
    return (
        func.unnest(cast(ids, ARRAY(PG_UUID(as_uuid=True))))
        .table_valued("id")
        .render_derived(name="k")
    )


async def fetch_records(session: AsyncSession, ids: list[UUID]) -> dict[UUID, MemoryRecord]:
    """The visible entries among `ids`, by id."""
    k = _id_list(ids)
    rows = await session.execute(_record_select().join(k, k.c.id == MemoryEntry.id))
    return {r.id: _record(r._asdict()) for r in rows}


def _record(row: dict[str, Any]) -> MemoryRecord:
    # importance is a float4 column: 0.7 comes back as 0.699999988; show what was stored.
    return MemoryRecord(**(row | {"importance": round(row["importance"], 6)}))


async def touch(session: AsyncSession, ids: list[UUID]) -> None:
    """Count a retrieval of these entries (access_count, last_accessed_at).

    Best effort: rows locked right now (by a concurrent update or re-embed write) are skipped
    rather than waited for, so a read never queues behind a writer.
    """
    if ids:
        k = _id_list(ids)
        unlocked = (
            select(MemoryEntry.id)
            .join(k, k.c.id == MemoryEntry.id)
            .with_for_update(skip_locked=True, of=MemoryEntry)
            .scalar_subquery()
        )
        await session.execute(
            update(MemoryEntry)
            .where(MemoryEntry.id.in_(unlocked))
            .values(access_count=MemoryEntry.access_count + 1, last_accessed_at=func.now())
            .execution_options(synchronize_session=False)
        )


async def fetch_touched(session: AsyncSession, ids: list[UUID]) -> dict[UUID, MemoryRecord]:
    """`touch` then `fetch_records` in one statement (one round trip): the visible entries among
    `ids`, by id, with this retrieval counted (rows locked right now are returned uncounted)."""
    e = MemoryEntry
    k = _id_list(ids)
    locked = (
        select(e.id).join(k, k.c.id == e.id).with_for_update(skip_locked=True, of=e).cte("locked")
    )
    touched = (
        update(e)
        .where(e.id == locked.c.id)
        .values(access_count=e.access_count + 1, last_accessed_at=func.now())
        .returning(e.id, e.access_count, e.last_accessed_at)
        .cte("touched")
    )
    # The SELECT sees the rows as before the UPDATE: take the counts from what it returned.
    columns = {c.key: c for c in _record_select().selected_columns}
    columns["access_count"] = func.coalesce(touched.c.access_count, e.access_count)
    columns["last_accessed_at"] = func.coalesce(touched.c.last_accessed_at, e.last_accessed_at)
    stmt = (
        select(*(c.label(name) for name, c in columns.items()))
        .select_from(e)
        .join(k, k.c.id == e.id)
        .outerjoin(touched, touched.c.id == e.id)
        .outerjoin(AgentSession, AgentSession.id == e.session_id)
    )
    rows = await session.execute(stmt)
    return {r.id: _record(r._asdict()) for r in rows}


class MemoryStore:
    """The CRUD verbs of long-term memory, embedding with `embedder`.

    `embedder` may be None for a store that only reads, updates tags/importance and deletes;
    storing or changing content then raises `EmbedderConfigError`.
    """

    def __init__(
        self,
        db: Database,
        embedder: Embedder | None,
        *,
        chunk_chars: int = 2000,
        overlap_chars: int = 200,
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.chunk_chars = chunk_chars
        self.overlap_chars = overlap_chars

    async def _embed(self, texts: list[str]) -> tuple[Embedder, list[list[float]] | None]:
        if self.embedder is None:
            raise EmbedderConfigError("this memory store has no embedder")
        try:
            return self.embedder, await self.embedder.embed(texts, "document")
        except EmbeddingError as exc:
            log.warning(
                "memory stored without vectors", embedder=self.embedder.name, error=str(exc)
            )
            return self.embedder, None

    async def create(
        self,
        principal: Principal,
        content: str,
        *,
        tags: list[str] | None = None,
        importance: float = 0.5,
        agent_id: UUID | None = None,
        session_key: str | None = None,
        session_id: UUID | None = None,
    ) -> list[MemoryRecord]:
        """Store `content` as one entry, or as chunks sharing a `document_id` when it is long.

        Raises `NotFoundError` (field agentId / sessionKey) for an agent or session the tenant
        does not have.
        """
        chunks = chunk_text(content, self.chunk_chars, self.overlap_chars)
        if not chunks:
            raise ValueError("content must not be empty")
        tags = clean_tags(tags or [])
        embedder, vectors = await self._embed(chunks)
        document_id = uuid.uuid4() if len(chunks) > 1 else None
        async with self.db.tenant(principal) as s:
            if agent_id is not None and await get_agent(s, agent_id) is None:
                raise NotFoundError("agentId", f"agent {agent_id} not found")
            if session_key is not None:
                found = await get_session_by_key(s, session_key)
                if found is None:
                    raise NotFoundError("sessionKey", f"session {session_key!r} not found")
                session_id = found.id
            rows = [
                {
                    "tenant_id": principal.tenant_id,
                    "agent_id": agent_id,
                    "session_id": session_id,
                    "content": chunk,
                    "tags": tags,
                    "importance": importance,
                    "document_id": document_id,
                    "chunk_index": i if document_id else None,
                    "embedding": vectors[i] if vectors else None,
                    "embedder": embedder.name if vectors else None,
                    "embedding_dim": embedder.dimension if vectors else None,
                }
                for i, chunk in enumerate(chunks)
            ]
            ids = list(
                await s.scalars(
                    insert(MemoryEntry).returning(MemoryEntry.id, sort_by_parameter_order=True),
                    rows,
                )
            )
            records = await fetch_records(s, ids)
        return [records[i] for i in ids]

    async def get(
        self, principal: Principal, entry_id: UUID, *, count_access: bool = True
    ) -> MemoryRecord | None:
        """The entry (None when absent or another tenant's); counts as an access by default."""
        async with self.db.tenant(principal) as s:
            if count_access:
                await touch(s, [entry_id])
            return (await fetch_records(s, [entry_id])).get(entry_id)

    async def update(
        self,
        principal: Principal,
        entry_id: UUID,
        *,
        content: str | None = None,
        tags: list[str] | None = None,
        importance: float | None = None,
    ) -> MemoryRecord | None:
        """Change content (re-embedded), tags and/or importance; None if absent.

        An entry is one chunk: content longer than `chunk_chars` raises ValueError (it would
        bypass chunking and may exceed what an embedding model takes; store it with `create`).
        """
        values: dict[str, Any] = {"updated_at": func.now()}
        if content is not None:
            if not content.strip():
                raise ValueError("content must not be empty")
            if len(content) > self.chunk_chars:
                raise ValueError(
                    f"content is longer than one chunk ({self.chunk_chars} characters); "
                    "store a long document as a new memory, which is chunked"
                )
            embedder, vectors = await self._embed([content])
            values |= {
                "content": content,
                "embedding": vectors[0] if vectors else None,
                "embedder": embedder.name if vectors else None,
                "embedding_dim": embedder.dimension if vectors else None,
            }
        if tags is not None:
            values["tags"] = clean_tags(tags)
        if importance is not None:
            values["importance"] = importance
        async with self.db.tenant(principal) as s:
            changed = await s.scalar(
                update(MemoryEntry)
                .where(MemoryEntry.id == entry_id)
                .values(**values)
                .returning(MemoryEntry.id)
            )
            if changed is None:
                return None
            return (await fetch_records(s, [entry_id])).get(entry_id)

    async def delete(self, principal: Principal, entry_id: UUID) -> bool:
        """Delete one entry (other chunks of its document stay); False when absent."""
        async with self.db.tenant(principal) as s:
            deleted = await s.scalar(
                delete(MemoryEntry).where(MemoryEntry.id == entry_id).returning(MemoryEntry.id)
            )
        return deleted is not None

    async def list(
        self,
        principal: Principal,
        *,
        tags: list[str] | None = None,
        agent_id: UUID | None = None,
        document_id: UUID | None = None,
        limit: int = 50,
        before: ListCursor | None = None,
    ) -> list[MemoryRecord]:
        """Newest first; `tags`: entries carrying all of them; `agent_id`: exactly that agent's."""
        e = MemoryEntry
        stmt = _record_select()
        if tags:
            stmt = stmt.where(e.tags.op("@>")(cast(tags, ARRAY(Text))))
        if agent_id is not None:
            stmt = stmt.where(e.agent_id == agent_id)
        if document_id is not None:
            stmt = stmt.where(e.document_id == document_id)
        if before is not None:
            stmt = stmt.where(tuple_(e.created_at, e.id) < (before.created_at, before.id))
        stmt = stmt.order_by(e.created_at.desc(), e.id.desc()).limit(limit)
        async with self.db.tenant(principal) as s:
            rows = await s.execute(stmt)
            return [_record(r._asdict()) for r in rows]
