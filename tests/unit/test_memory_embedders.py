"""Embedders: the offline hasher, and the Gemini / OpenAI clients against a local fake server."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from app.config import Settings
from app.memory.embedders import (
    EmbedderConfigError,
    EmbeddingError,
    GeminiEmbedder,
    OfflineEmbedder,
    OpenAIEmbedder,
    build_embedder,
    embedder_from_settings,
    hash_embed,
)
from app.memory.ranking import cosine


def settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)


# ------------------------------------------------------------------ offline


def test_offline_vectors_are_deterministic_and_normalised() -> None:
    v = hash_embed("Deploys run from main via CI", 256)
    assert v == hash_embed("Deploys run from main via CI", 256)
    assert len(v) == 256
    assert math.isclose(math.fsum(x * x for x in v), 1.0, rel_tol=1e-9)
    assert len(hash_embed("", 768)) == 768  # no words: still a unit vector
    assert math.isclose(math.fsum(x * x for x in hash_embed("!!!", 64)), 1.0)


def test_offline_similarity_is_lexical() -> None:
    deploy = hash_embed("deployment pipeline", 256)
    # word pieces shared (char trigrams) -> similar; same meaning, other words -> not
    unrelated = cosine(deploy, hash_embed("quarterly tax report", 256))
    assert cosine(deploy, hash_embed("deploying pipelines", 256)) > unrelated + 0.2
    assert cosine(hash_embed("car", 256), hash_embed("automobile", 256)) < 0.2
    assert cosine(hash_embed("postgresql", 256), hash_embed("postgersql", 256)) > 0.25


async def test_offline_embedder_interface() -> None:
    embedder = OfflineEmbedder(256)
    assert (embedder.name, embedder.dimension) == ("offline:hash-v1", 256)
    docs = await embedder.embed(["a b", "c d"], "document")
    assert docs[0] == (await embedder.embed(["a b"], "query"))[0]


# ------------------------------------------------------------------ fake provider


@dataclass
class FakeProvider:
    """A local HTTP server speaking the Gemini and OpenAI embeddings wire formats."""

    url: str
    requests: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)
    dimension: int = 768
    status: int = 200


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    state = FakeProvider(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            state.requests.append((self.path, dict(self.headers), body))
            if state.status != 200:
                self._send(state.status, {"error": {"message": "boom", "code": state.status}})
            elif self.path.endswith(":batchEmbedContents"):
                vectors = [
                    _vector(r["content"]["parts"][0]["text"], state) for r in body["requests"]
                ]
                self._send(200, {"embeddings": [{"values": v} for v in vectors]})
            else:
                data = [
                    {"object": "embedding", "index": i, "embedding": _vector(t, state)}
                    for i, t in reversed(list(enumerate(body["input"])))  # out of order on purpose
                ]
                usage = {"prompt_tokens": 1, "total_tokens": 1}
                self._send(
                    200, {"object": "list", "data": data, "model": body["model"], "usage": usage}
                )

        def _send(self, status: int, payload: Any) -> None:
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def _vector(text: str, state: FakeProvider) -> list[float]:
    """Unnormalised, text-dependent: the embedder must normalise."""
    return [float(len(text))] + [1.0] * (state.dimension - 1)


async def test_gemini_wire_format(provider: FakeProvider) -> None:
    embedder = GeminiEmbedder(
        "gemini-embedding-001", api_key="g-key", dimension=768, base_url=provider.url
    )
    texts = [f"text {i}" for i in range(130)]
    vectors = await embedder.embed(texts, "document")
    assert len(vectors) == 130 and all(len(v) == 768 for v in vectors)
    assert math.isclose(math.fsum(x * x for x in vectors[0]), 1.0)
    assert [len(r[2]["requests"]) for r in provider.requests] == [100, 30]  # API batch limit
    path, headers, body = provider.requests[0]
    assert path.endswith("/models/gemini-embedding-001:batchEmbedContents")
    assert headers["x-goog-api-key"] == "g-key"
    first = body["requests"][0]
    assert first["taskType"] == "RETRIEVAL_DOCUMENT"
    assert first["outputDimensionality"] == 768
    assert first["model"] == "models/gemini-embedding-001"
    assert first["content"]["parts"][0]["text"] == "text 0"

    await embedder.embed(["what?"], "query")
    assert provider.requests[-1][2]["requests"][0]["taskType"] == "RETRIEVAL_QUERY"


async def test_openai_wire_format(provider: FakeProvider) -> None:
    provider.dimension = 1536
    embedder = OpenAIEmbedder(
        "text-embedding-3-small", api_key="o-key", base_url=provider.url + "/v1"
    )
    vectors = await embedder.embed(["a", "bbbb"], "document")
    assert vectors[0][0] < vectors[1][0]  # re-ordered by `index`
    path, headers, body = provider.requests[0]
    assert path == "/v1/embeddings"
    assert headers["authorization"] == "Bearer o-key"
    assert body == {
        "model": "text-embedding-3-small",
        "input": ["a", "bbbb"],
        "encoding_format": "float",
    }
    sized = OpenAIEmbedder(
        "text-embedding-3-large",
        api_key="o-key",
        base_url=provider.url + "/v1",
        send_dimension=True,
    )
    await sized.embed(["x"], "query")
    assert provider.requests[-1][2]["dimensions"] == 1536


async def test_provider_failures_become_embedding_errors(provider: FakeProvider) -> None:
    wrong = OpenAIEmbedder("m", api_key="k", base_url=provider.url + "/v1", dimension=256)
    with pytest.raises(EmbeddingError, match="1536-dimensional"):
        provider.dimension = 1536
        await wrong.embed(["x"], "document")
    provider.status = 401
    with pytest.raises(EmbeddingError, match="openai:m"):
        await OpenAIEmbedder("m", api_key="k", base_url=provider.url + "/v1").embed(["x"], "query")
    gemini = GeminiEmbedder("gemini-embedding-001", api_key="k", base_url=provider.url)
    with pytest.raises(EmbeddingError, match="gemini:gemini-embedding-001"):
        await gemini.embed(["x"], "query")


# ------------------------------------------------------------------ settings


def test_build_from_settings(provider: FakeProvider) -> None:
    offline = build_embedder(settings())
    assert (offline.name, offline.dimension) == ("offline:hash-v1", 256)
    assert build_embedder(settings(memory_embedding_dim=768)).dimension == 768
    gemini = build_embedder(
        settings(memory_embedder="gemini:text-embedding-004", gemini_api_key="k")
    )
    assert (gemini.name, gemini.dimension) == ("gemini:text-embedding-004", 768)
    compatible = build_embedder(
        settings(memory_embedder="openai:nomic-embed-text", openai_base_url=provider.url)
    )
    assert (compatible.name, compatible.dimension) == ("openai:nomic-embed-text", 1536)
    with pytest.raises(EmbedderConfigError, match="GEMINI_API_KEY"):
        build_embedder(settings(memory_embedder="gemini:gemini-embedding-001"))
    with pytest.raises(EmbedderConfigError, match="OPENAI_API_KEY"):
        build_embedder(settings(memory_embedder="openai:text-embedding-3-small"))


def test_settings_reject_unknown_embedders_and_dimensions() -> None:
    with pytest.raises(ValueError, match="memory_embedder"):
        settings(memory_embedder="word2vec")
    with pytest.raises(ValueError, match="memory_embedding_dim"):
        settings(memory_embedding_dim=512)


def test_embedder_from_settings_is_cached() -> None:
    s = settings()
    assert embedder_from_settings(s) is embedder_from_settings(settings())
