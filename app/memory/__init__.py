"""Long-term memory: embedders, chunking, storage, hybrid search, re-embedding and memory tools.

* `embedders.py`: the `Embedder` interface, the offline feature-hashing embedder, Gemini and
  OpenAI-compatible providers, and `embedder_from_settings`.
* `chunking.py`: splitting long documents into overlapping chunks on paragraph/sentence bounds.
* `store.py`: create, read, update, delete and list entries (RLS-scoped sessions).
* `ranking.py`: reciprocal-rank fusion, importance/recency weights and MMR (pure functions).
* `search.py`: the hybrid search (HNSW vector candidates + full-text candidates).
* `reembed.py`: background re-embedding after the configured embedder changes.
* `tools.py`: the `memory_store`, `memory_search`, `memory_get` and `memory_forget` tools.
* `schemas.py`: request/response bodies of the memory API (`app/api/routes/memory.py`).
"""
