"""Helpers for the memory tests: a concept embedder that simulates meaning, and an API harness."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
from fastapi import FastAPI

from app.api.app import create_app
from app.api.routes import memory as memory_routes
from app.config import Settings
from app.db.engine import Database
from app.memory.embedders import Embedder, EmbedKind, hash_embed, l2_normalize

# Words that mean the same thing share an axis: a stand-in for a semantic model.
CONCEPTS: dict[str, int] = {
    **dict.fromkeys(["car", "cars", "automobile", "automobiles", "vehicle", "sedan"], 0),
    **dict.fromkeys(["dog", "dogs", "puppy", "canine", "hound"], 1),
    **dict.fromkeys(["invoice", "invoices", "bill", "billing", "receipt"], 2),
    **dict.fromkeys(["repair", "maintenance", "service", "servicing", "fix"], 3),
    **dict.fromkeys(["holiday", "vacation", "leave", "pto"], 4),
}


class ConceptEmbedder(Embedder):
    """Deterministic 'semantic' vectors: one axis per concept, plus a faint lexical hash part."""

    def __init__(self, name: str = "test:concepts", dimension: int = 256) -> None:
        self.name = name
        self.dimension = dimension
        self.calls: list[tuple[EmbedKind, list[str]]] = []

    async def embed(self, texts: Sequence[str], kind: EmbedKind) -> list[list[float]]:
        self.calls.append((kind, list(texts)))
        return [self.vector(t) for t in texts]

    def vector(self, text: str) -> list[float]:
        lexical = hash_embed(text, self.dimension)
        vector = [0.1 * v for v in lexical]
        for word in re.findall(r"\w+", text.lower()):
            if word in CONCEPTS:
                vector[CONCEPTS[word]] += 1.0
        return l2_normalize(vector)


class FailingEmbedder(Embedder):
    """An embedder whose provider is down."""

    def __init__(self, name: str = "test:down", dimension: int = 256) -> None:
        self.name = name
        self.dimension = dimension

    async def embed(self, texts: Sequence[str], kind: EmbedKind) -> list[list[float]]:
        from app.memory.embedders import EmbeddingError

        raise EmbeddingError("provider unavailable")


def memory_app(settings: Settings, database: Database, embedder: Embedder | None = None) -> FastAPI:
    """The API app exactly as `create_app` ships it (`embedder`: override the configured one)."""
    app = create_app(settings, database=database)
    if embedder is not None:
        app.dependency_overrides[memory_routes.memory_embedder] = lambda: embedder
    return app


@contextlib.asynccontextmanager
async def memory_client(
    settings: Settings, database: Database, embedder: Embedder | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client over the running memory app."""
    app = memory_app(settings, database, embedder)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


def contents(results: list[dict[str, Any]]) -> list[str]:
    """The `content` of each result, in order (readable assertions)."""
    return [r["content"] for r in results]
