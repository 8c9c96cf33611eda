"""Long-term memory: store (chunking long documents), list, read, update, delete, hybrid search."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query, Response

from app.api.deps import CurrentPrincipal, DatabaseDep, JsonBody, SettingsDep
from app.api.errors import ApiError
from app.api.schemas import error_responses
from app.config import Settings
from app.memory.embedders import Embedder, EmbedderConfigError, embedder_from_settings
from app.memory.ranking import Weights
from app.memory.reembed import embedding_status
from app.memory.schemas import (
    MemoryCreate,
    MemoryCreated,
    MemoryEntryOut,
    MemoryHit,
    MemoryPage,
    MemorySearch,
    MemorySearchResults,
    MemoryStatus,
    MemoryUpdate,
    MemoryWhy,
    entry_out,
)
from app.memory.search import search_memories
from app.memory.store import ListCursor, MemoryStore, clean_tags

router = APIRouter(prefix="/api/agent-runtime/memory", tags=["memory"])


def memory_embedder(settings: SettingsDep) -> Embedder:
    """The configured embedder (503 when it cannot be built, e.g. a missing API key)."""
    try:
        return embedder_from_settings(settings)
    except EmbedderConfigError as exc:
        raise ApiError(503, f"memory embedder unavailable: {exc}") from exc


EmbedderDep = Annotated[Embedder, Depends(memory_embedder)]


def _store(db: DatabaseDep, settings: SettingsDep, embedder: Embedder | None) -> MemoryStore:
    return MemoryStore(
        db,
        embedder,
        chunk_chars=settings.memory_chunk_chars,
        overlap_chars=settings.memory_chunk_overlap_chars,
    )


def _writer(db: DatabaseDep, settings: SettingsDep, embedder: EmbedderDep) -> MemoryStore:
    return _store(db, settings, embedder)


def _reader(db: DatabaseDep, settings: SettingsDep) -> MemoryStore:
    return _store(db, settings, None)  # works even when the embedder is misconfigured


WriterDep = Annotated[MemoryStore, Depends(_writer)]
ReaderDep = Annotated[MemoryStore, Depends(_reader)]
EntryIdPath = Annotated[UUID, Path(alias="id", description="The memory entry's id.")]


def _not_found(entry_id: UUID) -> ApiError:
    return ApiError(404, f"memory {entry_id} not found", field="id")


# ------------------------------------------------------------------ routes


@router.post(
    "",
    status_code=201,
    response_model=MemoryCreated,
    responses=error_responses(401, 404, 415, 422, 503),
)
async def create_memory(
    principal: CurrentPrincipal, store: WriterDep, _json: JsonBody, body: MemoryCreate
) -> MemoryCreated:
    """Store a memory (long content becomes overlapping chunks sharing a documentId)."""
    records = await store.create(
        principal,
        body.content,
        tags=body.tags,
        importance=body.importance,
        agent_id=body.agent_id,
        session_key=body.session_key,
    )
    return MemoryCreated(
        document_id=records[0].document_id, entries=[entry_out(r) for r in records]
    )


@router.get("", response_model=MemoryPage, responses=error_responses(401, 422))
async def list_memory(
    principal: CurrentPrincipal,
    store: ReaderDep,
    tag: Annotated[list[str] | None, Query(description="Entries with all of these tags.")] = None,
    agent_id: Annotated[UUID | None, Query(alias="agentId")] = None,
    document_id: Annotated[UUID | None, Query(alias="documentId")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: Annotated[str | None, Query(max_length=200, description="A nextCursor.")] = None,
) -> MemoryPage:
    """The tenant's entries, newest first (keyset-paginated)."""
    try:
        cursor = ListCursor.parse(before) if before is not None else None
        tags = clean_tags(tag) if tag else None
    except ValueError as exc:
        raise ApiError(422, str(exc), field="before" if before else "tag") from exc
    records = await store.list(
        principal,
        tags=tags,
        agent_id=agent_id,
        document_id=document_id,
        limit=limit + 1,
        before=cursor,
    )
    page = records[:limit]
    more = len(records) > limit
    next_cursor = ListCursor(page[-1].created_at, page[-1].id).encode() if more else None
    return MemoryPage(entries=[entry_out(r) for r in page], next_cursor=next_cursor)


@router.post(
    "/search",
    response_model=MemorySearchResults,
    responses=error_responses(401, 415, 422, 503),
)
async def search_memory(
    principal: CurrentPrincipal,
    db: DatabaseDep,
    embedder: EmbedderDep,
    settings: SettingsDep,
    _json: JsonBody,
    body: MemorySearch,
) -> MemorySearchResults:
    """Hybrid search (vector + full text, RRF, importance/recency, MMR); each result says why."""
    outcome = await search_memories(
        db,
        principal,
        embedder,
        body.query,
        limit=body.limit,
        tags=body.tags,
        agent_id=body.agent_id,
        **_search_settings(settings),
    )
    hits = [
        MemoryHit.model_validate(
            {
                **entry_out(r.record).model_dump(),
                "score": r.score,
                "why": MemoryWhy.model_validate(r.why),
            }
        )
        for r in outcome.results
    ]
    return MemorySearchResults(
        results=hits, embedder=outcome.embedder, vector_search=outcome.vector_search
    )


def _search_settings(settings: Settings) -> dict[str, Any]:
    return {
        "candidates": settings.memory_search_candidates,
        "ef_search": settings.memory_hnsw_ef_search,
        "weights": Weights.from_settings(settings),
    }


@router.get("/status", response_model=MemoryStatus, responses=error_responses(401, 503))
async def memory_status(
    principal: CurrentPrincipal, db: DatabaseDep, embedder: EmbedderDep
) -> MemoryStatus:
    """The active embedder and how many entries still wait for re-embedding."""
    status = await embedding_status(db, principal, embedder)
    return MemoryStatus(
        embedder=status.embedder,
        dimension=status.dimension,
        total=status.total,
        embedded=status.current,
        pending=status.pending,
    )


@router.get("/{id}", response_model=MemoryEntryOut, responses=error_responses(401, 404, 422))
async def get_memory(
    principal: CurrentPrincipal, store: ReaderDep, entry_id: EntryIdPath
) -> MemoryEntryOut:
    """One entry (counts as an access)."""
    record = await store.get(principal, entry_id)
    if record is None:
        raise _not_found(entry_id)
    return entry_out(record)


@router.patch(
    "/{id}", response_model=MemoryEntryOut, responses=error_responses(401, 404, 415, 422, 503)
)
async def update_memory(
    principal: CurrentPrincipal,
    store: ReaderDep,
    settings: SettingsDep,
    _json: JsonBody,
    body: MemoryUpdate,
    entry_id: EntryIdPath,
) -> MemoryEntryOut:
    """Change an entry's content (one chunk at most; re-embedded), tags and/or importance."""
    if body.content is not None:
        if len(body.content) > store.chunk_chars:
            raise ApiError(
                422,
                f"content is longer than one chunk ({store.chunk_chars} characters, "
                "MEMORY_CHUNK_CHARS); store a long document with POST, which chunks it",
                field="content",
            )
        store.embedder = memory_embedder(settings)  # only new content needs the embedder
    record = await store.update(
        principal, entry_id, content=body.content, tags=body.tags, importance=body.importance
    )
    if record is None:
        raise _not_found(entry_id)
    return entry_out(record)


@router.delete("/{id}", status_code=204, responses=error_responses(401, 404, 422))
async def delete_memory(
    principal: CurrentPrincipal, store: ReaderDep, entry_id: EntryIdPath
) -> Response:
    """Delete one entry (other chunks of its document stay)."""
    if not await store.delete(principal, entry_id):
        raise _not_found(entry_id)
    return Response(status_code=204)
