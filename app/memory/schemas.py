"""Request and response bodies of the memory API (camelCase on the wire)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from app.db.text import storable_text
from app.memory.search import MAX_LIMIT
from app.memory.store import MAX_TAGS, MemoryRecord, clean_tags

MAX_DOCUMENT_CHARS = 500_000
MAX_QUERY_CHARS = 2000
SESSION_KEY_PATTERN = r"^[A-Za-z0-9:_.-]+$"  # as app.api.schemas (the runs API)


class ApiModel(BaseModel):
    """camelCase aliases on the wire; Python names in code (as app.api.schemas.ApiModel)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


def _storable(value: str) -> str:
    """Postgres cannot store NUL or lone surrogates; blank text is no content."""
    return storable_text(value)


class _Body(ApiModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("tags", check_fields=False)
    @classmethod
    def _tags(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else clean_tags(value)

    @field_validator("content", "query", check_fields=False)
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return None if value is None else _storable(value)


_TAGS = "Labels, 1-64 characters each."
_IMPORTANCE = "0 (trivia) .. 1 (critical)."


class MemoryCreate(_Body):
    """A memory to store; content longer than MEMORY_CHUNK_CHARS is split into chunks."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"content": "Deploys run from `main` via CI.", "tags": ["ops"]}]
        }
    )

    content: str = Field(min_length=1, max_length=MAX_DOCUMENT_CHARS, description="Markdown.")
    tags: list[str] = Field(default_factory=list, max_length=MAX_TAGS, description=_TAGS)
    importance: float = Field(default=0.5, ge=0, le=1, strict=True, description=_IMPORTANCE)
    agent_id: UUID | None = Field(default=None, description="Owning agent; null: shared.")
    session_key: str | None = Field(
        default=None, min_length=1, max_length=200, pattern=SESSION_KEY_PATTERN
    )


class MemoryUpdate(_Body):
    """Fields to change (at least one); new content (one chunk at most) is re-embedded."""

    content: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_DOCUMENT_CHARS,
        description="At most MEMORY_CHUNK_CHARS characters: an entry is one chunk; store a "
        "longer document with POST, which chunks it.",
    )
    tags: list[str] | None = Field(default=None, max_length=MAX_TAGS, description=_TAGS)
    importance: float | None = Field(default=None, ge=0, le=1, strict=True, description=_IMPORTANCE)

    @model_validator(mode="after")
    def _something(self) -> MemoryUpdate:
        if self.content is None and self.tags is None and self.importance is None:
            raise ValueError("give at least one of content, tags, importance")
        return self


class MemorySearch(_Body):
    """A hybrid search."""

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    limit: int = Field(
        default=10, ge=1, le=MAX_LIMIT, strict=True, description=f"1..{MAX_LIMIT} results."
    )
    tags: list[str] | None = Field(
        default=None, max_length=MAX_TAGS, description="Only entries with all of these tags."
    )
    agent_id: UUID | None = Field(
        default=None, description="That agent's entries plus the shared (agent-less) ones."
    )


class MemoryEntryOut(ApiModel):
    """A stored memory entry."""

    id: UUID
    content: str
    tags: list[str]
    importance: float
    agent_id: UUID | None
    session_key: str | None
    document_id: UUID | None = Field(description="Shared by the chunks of one document.")
    chunk_index: int | None
    embedder: str | None = Field(description="Null: not embedded yet (text search only).")
    embedding_dim: int | None
    access_count: int
    last_accessed_at: datetime | None
    created_at: datetime
    updated_at: datetime


class MemoryCreated(ApiModel):
    """The stored entry, or the chunks of a long document (in order)."""

    document_id: UUID | None
    entries: list[MemoryEntryOut]


class MemoryPage(ApiModel):
    """A page of entries, newest first."""

    entries: list[MemoryEntryOut]
    next_cursor: str | None = Field(description="Pass as `before` for the next page.")


class MemoryWhy(ApiModel):
    """Why a result ranked where it did (see app/memory/ranking.py for the formula)."""

    vector_rank: int | None = Field(description="Rank among the vector candidates (1 = nearest).")
    vector_similarity: float | None = Field(description="Cosine similarity to the query.")
    text_rank: int | None = Field(description="Rank among the full-text matches.")
    text_score: float | None = Field(description="ts_rank_cd of the full-text match.")
    rrf: float = Field(description="Reciprocal-rank fusion: sum of 1/(k + rank).")
    importance_weight: float
    recency_weight: float
    age_days: float = Field(description="Days since the entry was last updated.")
    mmr_position: int = Field(description="Position chosen by MMR (the result's position).")
    mmr_max_similarity: float | None = Field(
        description="Highest similarity to a result ranked above it."
    )


class MemoryHit(MemoryEntryOut):
    """A search result."""

    score: float = Field(description="rrf × importanceWeight × recencyWeight.")
    why: MemoryWhy


class MemorySearchResults(ApiModel):
    """Search results in MMR order."""

    results: list[MemoryHit]
    embedder: str
    vector_search: bool = Field(description="False when the embedder failed: full text only.")


class MemoryStatus(ApiModel):
    """How much of the tenant's memory the active embedder has embedded."""

    embedder: str
    dimension: int
    total: int
    embedded: int
    pending: int = Field(description="Entries waiting for the background re-embed.")


def entry_out(record: MemoryRecord) -> MemoryEntryOut:
    """The wire form of a stored entry."""
    return MemoryEntryOut.model_validate(record, from_attributes=True)
