"""The memory tools through the registry: store, search, get, forget; agent scope; isolation."""

from __future__ import annotations

from typing import Any

import pytest

from app.auth.principal import Principal
from app.core.transcript import ToolCall, ToolResult
from app.db.engine import Database
from app.memory.embedders import OfflineEmbedder
from app.memory.store import MemoryStore
from app.memory.tools import memory_tools
from app.tools.base import ToolContext
from app.tools.registry import ToolRegistry
from tests.integration.tool_support import context_for


@pytest.fixture
def tools() -> ToolRegistry:
    return ToolRegistry(memory_tools())


async def call(tools: ToolRegistry, ctx: ToolContext, name: str, **args: Any) -> ToolResult:
    return await tools.execute(ctx, ToolCall(id="c", name=name, args=args))


def test_contract(tools: ToolRegistry) -> None:
    assert tools.names() == ["memory_forget", "memory_get", "memory_search", "memory_store"]
    assert {tools.get(n).group for n in tools.names()} == {"memory"}  # type: ignore[union-attr]
    store = tools.get("memory_store")
    assert store is not None and set(store.parameters["properties"]) == {
        "content",
        "tags",
        "importance",
    }
    assert set(tools.get("memory_search").parameters["properties"]) == {"query", "limit"}  # type: ignore[union-attr]


async def test_store_search_get_forget(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, memory_chunk_chars=300, session_key="chat:mem")
    stored = await call(
        tools,
        ctx,
        "memory_store",
        content="The user prefers metric units.",
        tags=["prefs"],
        importance=0.9,
    )
    assert stored.ok, stored.error
    assert stored.result["chunks"] == 1 and stored.result["embedder"] == "offline:hash-v1"
    entry_id = stored.result["ids"][0]

    found = await call(tools, ctx, "memory_search", query="metric units")
    assert found.ok and found.result["results"][0]["id"] == entry_id
    assert found.result["results"][0]["sessionKey"] == "chat:mem"
    assert "why" in found.result["results"][0]

    got = await call(tools, ctx, "memory_get", id=entry_id)
    assert got.ok and got.result["content"] == "The user prefers metric units."
    assert got.result["tags"] == ["prefs"] and got.result["importance"] == 0.9

    gone = await call(tools, ctx, "memory_forget", id=entry_id)
    assert gone.ok and gone.result == {"id": entry_id, "forgotten": True}
    again = await call(tools, ctx, "memory_get", id=entry_id)
    assert not again.ok and "not found" in (again.error or "")
    again = await call(tools, ctx, "memory_forget", id=entry_id)
    assert not again.ok and "not found" in (again.error or "")


async def test_long_content_is_chunked(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, memory_chunk_chars=300, session_key="chat:doc")
    content = " ".join(f"Sentence {i} of the design doc." for i in range(60))
    stored = await call(tools, ctx, "memory_store", content=content)
    assert stored.ok and stored.result["chunks"] > 3 and stored.result["documentId"]


async def test_bad_arguments(database: Database, alice: Principal, tools: ToolRegistry) -> None:
    ctx = await context_for(database, alice, memory_chunk_chars=300, session_key="chat:bad")
    cases: list[tuple[str, dict[str, Any]]] = [
        ("memory_store", {}),
        ("memory_store", {"content": "x", "importance": 2}),
        ("memory_store", {"content": "x", "tags": [""]}),
        ("memory_store", {"content": "   "}),
        ("memory_search", {"query": "x", "limit": 100}),
        ("memory_search", {"query": "  "}),
        ("memory_get", {"id": "nope"}),
        ("memory_forget", {}),
    ]
    for name, args in cases:
        result = await call(tools, ctx, name, **args)
        assert not result.ok, (name, args)
        assert "internal" not in (result.error or ""), result.error


async def test_agent_scope_and_tenant_isolation(
    database: Database, alice: Principal, mallory: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, memory_chunk_chars=300, session_key="chat:scope")
    shared = await MemoryStore(database, OfflineEmbedder()).create(
        alice, "Shared fact: office wifi is guest-5."
    )
    stored = await call(tools, ctx, "memory_store", content="Agent fact: office plants need water.")
    assert stored.ok
    found = await call(tools, ctx, "memory_search", query="office", limit=5)
    assert {r["content"] for r in found.result["results"]} == {
        "Shared fact: office wifi is guest-5.",
        "Agent fact: office plants need water.",
    }
    evil = await context_for(database, mallory, "chat:evil")
    assert (await call(tools, evil, "memory_search", query="office")).result["results"] == []
    for name in ("memory_get", "memory_forget"):
        result = await call(tools, evil, name, id=str(shared[0].id))
        assert not result.ok and "not found" in (result.error or "")
    assert (await call(tools, ctx, "memory_get", id=str(shared[0].id))).ok
