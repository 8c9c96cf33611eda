"""Embedders behind one interface: offline feature hashing, Gemini, and OpenAI-compatible APIs.

Every embedder returns L2-normalised vectors of its `dimension`; an entry records the embedder's
`name` and dimension next to its vector, so vectors of different embedders are never compared.
"""

from __future__ import annotations

import hashlib
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Literal

from app.config import Settings
from app.llm.clients import SharedClient

EmbedKind = Literal["document", "query"]
"""What a text is: a stored document, or a search query (some models embed them differently)."""

INDEXED_DIMENSIONS = (256, 768, 1536)
"""Dimensions with a partial HNSW index (see the initial migration)."""
EMBED_TIMEOUT_SECONDS = 30.0


class EmbeddingError(RuntimeError):
    """The embedder could not embed (provider down, bad key, malformed answer)."""


class EmbedderConfigError(ValueError):
    """The configured embedder cannot be built (unknown kind, missing API key, bad dimension)."""


class Embedder(ABC):
    """Turns texts into vectors of `dimension` floats (L2-normalised)."""

    name: str
    """Recorded with every entry: `offline:hash-v1`, `gemini:<model>`, `openai:<model>`."""
    dimension: int

    @abstractmethod
    async def embed(self, texts: Sequence[str], kind: EmbedKind) -> list[list[float]]:
        """One vector per text, in order; raises `EmbeddingError` on failure."""


def l2_normalize(vector: Sequence[float]) -> list[float]:
    """`vector` scaled to length 1 (a zero vector is returned unchanged)."""
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm > 0 else list(vector)


# ------------------------------------------------------------------ offline

_WORD = re.compile(r"\w+")
# fmt: off
_STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "from", "has", "have", "i",
    "in", "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "were",
    "will", "with",
})
# fmt: on
_BIGRAM_WEIGHT = 0.5


@lru_cache(maxsize=262_144)
def _hashed(feature: str, dimension: int) -> tuple[int, float]:
    """Bucket and sign of a feature (blake2b: stable across processes, unlike `hash`)."""
    h = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
    return h % dimension, (1.0 if (h >> 40) & 1 else -1.0)


@lru_cache(maxsize=131_072)
def _word_features(word: str, dimension: int) -> tuple[tuple[int, float], ...]:
    """The unigram (weight 1) and the word's character trigrams (together weight 1)."""
    padded = f"<{word}>"
    trigrams = [padded[i : i + 3] for i in range(len(padded) - 2)]
    each = 1.0 / math.sqrt(len(trigrams))
    features = [_hashed("w:" + word, dimension)]
    features += [
        (idx, sign * each) for idx, sign in (_hashed("c:" + t, dimension) for t in trigrams)
    ]
    return tuple(features)


def hash_embed(text: str, dimension: int = 256) -> list[float]:
    """Feature-hash `text` into an L2-normalised vector (the offline embedder's function).

    Features: lower-cased word unigrams, word bigrams and character trigrams of each word, each
    hashed (blake2b) into a signed bucket. Similar vectors mean shared words, word pairs or word
    pieces — LEXICAL overlap (`deploy` ~ `deployment`), not meaning (`car` !~ `automobile`).
    """
    vector = [0.0] * dimension
    words = [w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS]
    for word in words:
        for idx, weight in _word_features(word, dimension):
            vector[idx] += weight
    for first, second in zip(words, words[1:], strict=False):
        idx, sign = _hashed(f"b:{first} {second}", dimension)
        vector[idx] += sign * _BIGRAM_WEIGHT
    if not words:  # no word at all: a fixed vector rather than a zero one (cosine needs a norm)
        idx, sign = _hashed("empty:", dimension)
        vector[idx] = sign
    return l2_normalize(vector)


class OfflineEmbedder(Embedder):
    """Feature hashing of word unigrams, bigrams and character trigrams; no key, no download.

    It captures LEXICAL overlap only — shared words and word pieces — not meaning: synonyms and
    paraphrases with no words in common are not similar to it. Use a provider embedder for
    semantic search; this one keeps the runtime fully offline and deterministic (tests, demos).
    """

    def __init__(self, dimension: int = 256) -> None:
        self.name = "offline:hash-v1"
        self.dimension = dimension

    async def embed(self, texts: Sequence[str], kind: EmbedKind) -> list[list[float]]:
        """The same vector for documents and queries (the hashing is symmetric)."""
        return [hash_embed(t, self.dimension) for t in texts]


# ------------------------------------------------------------------ providers


def _checked(
    vectors: list[list[float]], texts: Sequence[str], dimension: int, who: str
) -> list[list[float]]:
    if len(vectors) != len(texts):
        raise EmbeddingError(f"{who} returned {len(vectors)} embeddings for {len(texts)} texts")
    for vector in vectors:
        if len(vector) != dimension:
            raise EmbeddingError(
                f"{who} returned {len(vector)}-dimensional embeddings, expected {dimension} "
                "(set MEMORY_EMBEDDING_DIM to the model's output dimension)"
            )
    return [l2_normalize(v) for v in vectors]


class GeminiEmbedder(Embedder):
    """Gemini embeddings through google-genai (`gemini-embedding-001`, `text-embedding-004`).

    Documents are embedded with task type RETRIEVAL_DOCUMENT, queries with RETRIEVAL_QUERY, at
    `output_dimensionality` = `dimension` (768 by default), and re-normalised (Gemini returns
    unnormalised vectors below its full 3072 dimensions).
    """

    max_batch = 100  # batchEmbedContents accepts at most 100 requests

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        dimension: int = 768,
        base_url: str | None = None,
        vertex: tuple[str | None, str | None] | None = None,
        timeout_seconds: float = EMBED_TIMEOUT_SECONDS,
    ) -> None:
        from google import genai
        from google.genai import types

        self.name = f"gemini:{model}"
        self.dimension = dimension
        self._model = model
        self._types = types
        options = types.HttpOptions(base_url=base_url, timeout=int(timeout_seconds * 1000))

        def build() -> genai.Client:
            if vertex is not None:
                project, location = vertex
                return genai.Client(
                    vertexai=True, project=project, location=location, http_options=options
                )
            return genai.Client(api_key=api_key, http_options=options)

        key = ("memory-gemini", api_key, base_url, vertex, timeout_seconds)
        self._client = SharedClient(key, build)

    async def embed(self, texts: Sequence[str], kind: EmbedKind) -> list[list[float]]:
        """Embed in batches of 100 texts."""
        task = "RETRIEVAL_QUERY" if kind == "query" else "RETRIEVAL_DOCUMENT"
        config = self._types.EmbedContentConfig(
            task_type=task, output_dimensionality=self.dimension
        )
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.max_batch):
            batch = list(texts[start : start + self.max_batch])
            try:
                response = await self._client.get().aio.models.embed_content(
                    model=self._model, contents=batch, config=config
                )
            except Exception as exc:  # the SDK raises many types; all mean "no vectors"
                raise EmbeddingError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
            vectors += [list(e.values or []) for e in response.embeddings or []]
        return _checked(vectors, texts, self.dimension, self.name)


class OpenAIEmbedder(Embedder):
    """OpenAI embeddings (`text-embedding-3-small`, 1536) or any OpenAI-compatible server.

    `dimensions` is sent only when `send_dimension` (MEMORY_EMBEDDING_DIM set explicitly), since
    older models and many compatible servers reject it.
    """

    max_batch = 256

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        dimension: int = 1536,
        base_url: str | None = None,
        send_dimension: bool = False,
        timeout_seconds: float = EMBED_TIMEOUT_SECONDS,
    ) -> None:
        import openai

        self.name = f"openai:{model}"
        self.dimension = dimension
        self._model = model
        self._send_dimension = send_dimension

        def build() -> openai.AsyncOpenAI:
            return openai.AsyncOpenAI(
                api_key=api_key, base_url=base_url, timeout=timeout_seconds, max_retries=2
            )

        self._client = SharedClient(("memory-openai", api_key, base_url, timeout_seconds), build)

    async def embed(self, texts: Sequence[str], kind: EmbedKind) -> list[list[float]]:
        """Embed in batches of 256 texts (documents and queries alike)."""
        import openai

        client = self._client.get()
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.max_batch):
            batch = list(texts[start : start + self.max_batch])
            try:
                if self._send_dimension:
                    response = await client.embeddings.create(
                        model=self._model,
                        input=batch,
                        encoding_format="float",
                        dimensions=self.dimension,
                    )
                else:
                    response = await client.embeddings.create(
                        model=self._model, input=batch, encoding_format="float"
                    )
            except openai.OpenAIError as exc:
                raise EmbeddingError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
            vectors += [list(d.embedding) for d in sorted(response.data, key=lambda d: d.index)]
        return _checked(vectors, texts, self.dimension, self.name)


# ------------------------------------------------------------------ from settings

_BUILT: dict[tuple[Any, ...], Embedder] = {}


def build_embedder(settings: Settings) -> Embedder:
    """A new embedder as configured by `MEMORY_EMBEDDER` / `MEMORY_EMBEDDING_DIM` and the keys."""
    spec = settings.memory_embedder
    dim = settings.memory_embedding_dim
    kind, _, model = spec.partition(":")
    if kind == "offline":
        return OfflineEmbedder(dim or 256)
    if kind == "gemini" and model:
        if settings.google_genai_use_vertexai:
            vertex = (settings.google_cloud_project, settings.google_cloud_location)
            return GeminiEmbedder(model, dimension=dim or 768, vertex=vertex)
        secret = settings.gemini_api_key or settings.google_api_key
        if secret is None:
            raise EmbedderConfigError(f"MEMORY_EMBEDDER={spec} needs GEMINI_API_KEY")
        return GeminiEmbedder(
            model,
            api_key=secret.get_secret_value(),
            dimension=dim or 768,
            base_url=settings.google_gemini_base_url,
        )
    if kind == "openai" and model:
        secret = settings.openai_api_key
        if secret is None and not settings.openai_base_url:
            raise EmbedderConfigError(
                f"MEMORY_EMBEDDER={spec} needs OPENAI_API_KEY (or OPENAI_BASE_URL for a "
                "compatible server without keys)"
            )
        return OpenAIEmbedder(
            model,
            api_key=secret.get_secret_value() if secret else "unused",
            dimension=dim or 1536,
            base_url=settings.openai_base_url,
            send_dimension=dim is not None,
        )
    raise EmbedderConfigError(
        f"unknown MEMORY_EMBEDDER {spec!r} (offline | gemini:<model> | openai:<model>)"
    )


def embedder_from_settings(settings: Settings) -> Embedder:
    """The process-wide embedder for these settings (built once, then reused)."""
    key = (
        settings.memory_embedder,
        settings.memory_embedding_dim,
        settings.gemini_api_key,
        settings.google_api_key,
        settings.google_genai_use_vertexai,
        settings.google_cloud_project,
        settings.google_cloud_location,
        settings.google_gemini_base_url,
        settings.openai_api_key,
        settings.openai_base_url,
    )
    embedder = _BUILT.get(key)
    if embedder is None:
        embedder = _BUILT[key] = build_embedder(settings)
    return embedder
