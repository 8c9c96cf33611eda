"""The memory tools (group `memory`): `memory_store`, `memory_search`, `memory_get`, `memory_forget`.

Names and arguments are a contract. Entries a run stores belong to the run's agent and session;
`memory_search` finds the agent's entries and the tenant's shared (agent-less) ones. `memory_get`
and `memory_forget` take any id of the tenant (RLS), as the API does.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import select

from app.db.models import AgentSession
from app.memory.embedders import Embedder, EmbedderConfigError, embedder_from_settings
from app.memory.ranking import Weights
from app.memory.search import search_memories
from app.memory.store import MAX_TAG_CHARS, MAX_TAGS, MemoryStore
from app.tools.base import Tool, ToolContext, ToolError

MAX_TOOL_CONTENT_CHARS = 200_000
TOOL_SEARCH_DEFAULT = 5
TOOL_SEARCH_MAX = 20

_ID = {
    "type": "string",
    "pattern": "^[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}$",
    "description": "The memory's id (from memory_store or memory_search).",
}


class _MemoryTool(Tool):
    group = "memory"

    def __init__(self, embedder: Embedder | None = None) -> None:
        self._embedder = embedder

    def embedder(self, ctx: ToolContext) -> Embedder:
        try:
            return self._embedder or embedder_from_settings(ctx.settings)
        except EmbedderConfigError as exc:
            raise ToolError(f"long-term memory is not configured: {exc}") from None

    def store(self, ctx: ToolContext, *, embeds: bool = False) -> MemoryStore:
        return MemoryStore(
            ctx.db,
            self.embedder(ctx) if embeds else None,
            chunk_chars=ctx.settings.memory_chunk_chars,
            overlap_chars=ctx.settings.memory_chunk_overlap_chars,
        )


async def _agent_of(ctx: ToolContext) -> UUID | None:
    async with ctx.db.tenant(ctx.principal) as s:
        agent_id: UUID | None = await s.scalar(
            select(AgentSession.agent_id).where(AgentSession.id == ctx.session_id)
        )
    return agent_id


def _uuid(raw: str) -> UUID:
    try:
        return UUID(raw)
    except ValueError:
        raise ToolError(f"{raw!r} is not a memory id") from None


class MemoryStoreTool(_MemoryTool):
    """Remember a fact, preference or document for later runs."""

    name = "memory_store"
    description = (
        "Save something worth remembering across sessions (markdown). Long documents are split "
        "into overlapping chunks. Optional `tags` to filter by later and `importance` from 0 "
        "(trivia) to 1 (critical), default 0.5."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "content": {"type": "string", "minLength": 1, "maxLength": MAX_TOOL_CONTENT_CHARS},
            "tags": {
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": MAX_TAG_CHARS},
                "maxItems": MAX_TAGS,
            },
            "importance": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["content"],
        "additionalProperties": False,
    }

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """`{"ids", "documentId", "chunks", "embedder"}`."""
        try:
            records = await self.store(ctx, embeds=True).create(
                ctx.principal,
                args["content"],
                tags=args.get("tags"),
                importance=float(args.get("importance", 0.5)),
                agent_id=await _agent_of(ctx),
                session_id=ctx.session_id,
            )
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        first = records[0]
        return {
            "ids": [str(r.id) for r in records],
            "documentId": str(first.document_id) if first.document_id else None,
            "chunks": len(records),
            "embedder": first.embedder,
        }


class MemorySearchTool(_MemoryTool):
    """Find remembered entries by meaning and keywords."""

    name = "memory_search"
    description = (
        "Search long-term memory (hybrid: vector similarity + full-text keywords, weighted by "
        "importance and recency, near-duplicates pushed down). Returns the best entries with a "
        f"`score` and `why`. `limit` defaults to {TOOL_SEARCH_DEFAULT}."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 2000},
            "limit": {"type": "integer", "minimum": 1, "maximum": TOOL_SEARCH_MAX},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    idempotent = True

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """`{"results": [{"id", "content", "tags", "importance", "score", "why", ...}]}`."""
        if not args["query"].strip():
            raise ToolError("query must not be blank")
        settings = ctx.settings
        outcome = await search_memories(
            ctx.db,
            ctx.principal,
            self.embedder(ctx),
            args["query"],
            limit=args.get("limit", TOOL_SEARCH_DEFAULT),
            agent_id=await _agent_of(ctx),
            candidates=settings.memory_search_candidates,
            ef_search=settings.memory_hnsw_ef_search,
            weights=Weights.from_settings(settings),
        )
        return {
            "results": [
                {**r.record.as_json(), "score": r.score, "why": r.why} for r in outcome.results
            ]
        }


class MemoryGetTool(_MemoryTool):
    """Read one remembered entry."""

    name = "memory_get"
    description = "Read one memory entry by id."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"id": _ID},
        "required": ["id"],
        "additionalProperties": False,
    }
    idempotent = True

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """The entry (content, tags, importance, timestamps, access count)."""
        entry_id = _uuid(args["id"])
        record = await self.store(ctx).get(ctx.principal, entry_id)
        if record is None:
            raise ToolError(f"memory {entry_id} not found")
        return record.as_json()


class MemoryForgetTool(_MemoryTool):
    """Delete one remembered entry."""

    name = "memory_forget"
    description = "Delete one memory entry by id (other chunks of the same document stay)."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"id": _ID},
        "required": ["id"],
        "additionalProperties": False,
    }
    idempotent = True  # deleting twice leaves the same state (the second call reports not found)
    risk = "medium"

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """`{"id", "forgotten": true}`."""
        entry_id = _uuid(args["id"])
        if not await self.store(ctx).delete(ctx.principal, entry_id):
            raise ToolError(f"memory {entry_id} not found")
        return {"id": str(entry_id), "forgotten": True}


def memory_tools(embedder: Embedder | None = None) -> list[Tool]:
    """One instance of each memory tool (`embedder`: override the configured one, e.g. tests)."""
    return [
        MemoryStoreTool(embedder),
        MemorySearchTool(embedder),
        MemoryGetTool(embedder),
        MemoryForgetTool(embedder),
    ]
