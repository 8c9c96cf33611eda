"""Memory benchmark: hybrid search with 1,000 tenants, old path (RLS) against new (definer fn).

A synthetic corpus (deterministic: topic vocabularies of pseudo-words, Zipf-ish sampling) is
embedded with the offline embedder (256 dims, two processes) and bulk-loaded with COPY into a
fresh database: one big tenant (`--big`, 100k entries) and `--small-tenants` (999) small ones of
`--small-size` (30) entries each; the HNSW index is built after loading. Then, query by query,
for the big tenant and for a small tenant (query i goes to small tenant 1 + i mod N):

* new: the whole `search_memories` with the app's defaults (query embedding, the candidate
  function `agent_runtime_memory_candidates` of migration 0022, RRF, weights, MMR, access-count
  update, record fetch), limit 10;
* old: the same search as it ran before 0022 (`old_path.py`: one statement under RLS, which kept
  the full-text side off the GIN index), in the same run on the same data, order alternating;
* recall@10 of the vector top 10 each path fuses (the entries it ranks 1-10 on its vector side)
  against the exact top 10 of the tenant (sequential scan): |hits| / 10, an entry tied with the
  exact 10th counts as a hit;
* same top 10: share of queries whose final 10 results (ids, in order) are equal old vs new;
* the candidate function alone: a transaction (role + claims) with just the new candidate call,
  to tell the database's part of a search from the rest (ranking in Python, round trips).

Every latency includes the transaction the app opens (role + JWT claims).

    .venv/bin/python bench/memory/run.py
    .venv/bin/python bench/memory/run.py --big 10000 --small-tenants 99 --queries 50
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.auth.principal import Principal  # noqa: E402
from app.config import Settings  # noqa: E402
from app.db.embedded import EmbeddedPostgres  # noqa: E402
from app.db.engine import Database  # noqa: E402
from app.db.migrate import upgrade_to_head  # noqa: E402
from app.memory.embedders import OfflineEmbedder, hash_embed  # noqa: E402
from app.memory.search import (  # noqa: E402
    CANDIDATES,
    search_memories,
    vector_literal,
)
from bench.common import connect, pct  # noqa: E402
from bench.memory.old_path import old_candidates, old_search  # noqa: E402

DIM = 256
# What search_memories uses by default:
APP_EF_SEARCH: int = Settings.model_fields["memory_hnsw_ef_search"].default
APP_CANDIDATES: int = Settings.model_fields["memory_search_candidates"].default
EMBEDDER = OfflineEmbedder(DIM)
HNSW = (
    "CREATE INDEX agent_memory_entries_hnsw_256 ON agent_memory_entries "
    "USING hnsw ((embedding::vector(256)) vector_cosine_ops) WHERE embedding_dim = 256"
)
SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "su",
    "ra",
    "to",
    "vi",
    "ze",
    "pa",
    "do",
    "fu",
    "gi",
    "ha",
    "jo",
    "ku",
    "le",
    "ma",
    "no",
    "pi",
    "ru",
    "se",
    "ti",
    "wa",
    "yo",
]


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


class Corpus:
    """Deterministic synthetic memories: each entry mostly uses its topic's words."""

    def __init__(self, seed: int = 42, topics: int = 300) -> None:
        rng = random.Random(seed)
        self.common = _vocabulary(rng, 3000)
        self.topics = [rng.sample(self.common, 60) for _ in range(topics)]

    def entry(self, i: int) -> str:
        rng = random.Random(i)
        topic = self.topics[i % len(self.topics)]
        words = [
            rng.choice(topic[: rng.choice((10, 30, 60))])
            if rng.random() < 0.7
            else rng.choice(self.common)
            for _ in range(rng.randint(12, 40))
        ]
        return " ".join(words).capitalize() + "."

    def query(self, i: int) -> str:
        rng = random.Random(10_000_000 + i)
        words = self.entry(rng.randrange(1_000_000)).rstrip(".").lower().split()
        return " ".join(rng.sample(words, min(len(words), rng.randint(2, 5))))


def _embed_row(args: tuple[int, str]) -> tuple[int, str, str]:
    i, content = args
    vector = hash_embed(content, DIM)
    return i, content, "[" + ",".join(f"{v:.6g}" for v in vector) + "]"


def tenant_of(i: int, big: int, small_size: int) -> str:
    """Entry i's tenant: bench-0 holds the first `big`, then `small_size` each."""
    return "bench-0" if i < big else f"bench-{1 + (i - big) // small_size}"


def load(url: str, corpus: Corpus, big: int, small: int, small_size: int) -> tuple[float, float]:
    """Embed and COPY every entry, then build the HNSW index; (load s, build s)."""
    total = big + small * small_size
    t0 = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        rows = pool.imap(_embed_row, ((i, corpus.entry(i)) for i in range(total)), 500)
        with connect(url) as conn:
            conn.execute("DROP INDEX IF EXISTS agent_memory_entries_hnsw_256")
            with (
                conn.cursor() as cur,
                cur.copy(
                    "COPY agent_memory_entries (tenant_id, content, tags, importance, embedding, "
                    "embedder, embedding_dim, created_at, updated_at) FROM STDIN"
                ) as copy,
            ):
                for i, content, vector in rows:
                    copy.write_row(
                        (
                            tenant_of(i, big, small_size),
                            content,
                            [f"t{i % 20}"],
                            ((i * 31) % 100) / 100,
                            vector,
                            EMBEDDER.name,
                            DIM,
                            _ts(i),
                            _ts(i),
                        )
                    )
    loaded = time.perf_counter() - t0
    t1 = time.perf_counter()
    with connect(url) as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute("SET max_parallel_maintenance_workers = 1")
        conn.execute(HNSW)
        conn.execute("VACUUM ANALYZE agent_memory_entries")
    return loaded, time.perf_counter() - t1


def _ts(i: int) -> str:
    return f"2025-{1 + i % 12:02d}-{1 + i % 28:02d} 12:00:00+00"


async def _exact(db: Database, tenant: str, qvec: str) -> list[float]:
    """The tenant's exact 10 smallest distances (no HNSW), as the owner."""
    async with db.owner() as s:
        await s.execute(text("SET LOCAL enable_indexscan = off"))
        rows = await s.execute(
            text(
                "SELECT embedding::vector(256) <=> CAST(:q AS vector(256)) AS d "
                "FROM agent_memory_entries WHERE tenant_id = :t AND embedding_dim = 256 "
                "ORDER BY 1 LIMIT 10"
            ),
            {"q": qvec, "t": tenant},
        )
        return [r.d for r in rows]


def _recall(ann: list[float], exact: list[float], k: int = 10) -> float:
    """Share of the ANN top k at least as near as the exact k-th (ties count as hits)."""
    if not exact:
        return 1.0
    bound = exact[min(k, len(exact)) - 1] + 1e-6
    return sum(1 for d in ann[:k] if d <= bound) / min(k, len(exact))


def _vector_top10(rows: list[Any]) -> list[float]:
    """Distances of the entries a candidate set ranks 1-10 on its vector side."""
    ranked = sorted((r.vector_rank, 1.0 - r.vector_similarity) for r in rows if r.vector_rank)
    return [distance for rank, distance in ranked if rank <= 10]


async def _new_candidates(db: Database, who: Principal, query: str) -> list[Any]:
    qvec = (await EMBEDDER.embed([query], "query"))[0]
    params = {
        "query": query,
        "qvec": vector_literal(qvec),
        "embedder": EMBEDDER.name,
        "dim": DIM,
        "candidates": APP_CANDIDATES,
        "ef_search": APP_EF_SEARCH,
        "agent_id": None,
        "tags": [],
        "sync_commit": "on",
    }
    async with db.tenant(who) as s:
        return list((await s.execute(CANDIDATES, params)).all())


async def measure(url: str, corpus: Corpus, queries: int, small: int) -> dict[str, list[float]]:
    """Per tenant kind (big, small): old/new latencies (ms), recall@10, same-top-10 flags."""
    db = Database(url, pool_size=2)
    out: dict[str, list[float]] = {}
    try:
        for i in range(queries):
            query = corpus.query(i)
            qvec = vector_literal(hash_embed(query, DIM))
            for kind, tenant in (("big", "bench-0"), ("small", f"bench-{1 + i % small}")):
                who = Principal(user_id="bench", tenant_id=tenant)
                exact = await _exact(db, tenant, qvec)
                ids: dict[str, list[str]] = {}
                for path in ("new", "old") if i % 2 else ("old", "new"):
                    t = time.perf_counter()
                    if path == "new":
                        found = await search_memories(
                            db,
                            who,
                            EMBEDDER,
                            query,
                            limit=10,
                            candidates=APP_CANDIDATES,
                            ef_search=APP_EF_SEARCH,
                        )
                        ids[path] = [str(r.record.id) for r in found.results]
                    else:
                        ids[path] = await old_search(
                            db, who, EMBEDDER, query, APP_CANDIDATES, APP_EF_SEARCH
                        )
                    out.setdefault(f"{kind}_{path}_ms", []).append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                new_rows = await _new_candidates(db, who, query)
                out.setdefault(f"{kind}_fn_ms", []).append((time.perf_counter() - t) * 1000)
                old_rows = await old_candidates(
                    db, who, EMBEDDER, query, APP_CANDIDATES, APP_EF_SEARCH
                )
                for path, rows in (("new", new_rows), ("old", old_rows)):
                    out.setdefault(f"{kind}_{path}_recall", []).append(
                        _recall(_vector_top10(rows), exact)
                    )
                out.setdefault(f"{kind}_same", []).append(float(ids["old"] == ids["new"]))
    finally:
        await db.dispose()
    return out


def _p(values: list[float]) -> str:
    return f"{pct(values, 50):.1f} / {pct(values, 95):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--big", type=int, default=100_000, help="entries of the big tenant")
    parser.add_argument("--small-tenants", type=int, default=999)
    parser.add_argument("--small-size", type=int, default=30, help="entries per small tenant")
    parser.add_argument("--queries", type=int, default=200, help="per tenant kind")
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="artm-", dir="/tmp"))
    pg = None
    server_url = os.environ.get("DATABASE_URL")
    if not server_url:
        pg = EmbeddedPostgres(data_dir)
        server_url = pg.start()
    try:
        with connect(server_url) as conn:
            conn.execute("DROP DATABASE IF EXISTS bench_memory WITH (FORCE)")
            conn.execute("CREATE DATABASE bench_memory")
        url = (
            make_url(server_url).set(database="bench_memory").render_as_string(hide_password=False)
        )
        upgrade_to_head(url)
        loaded, built = load(url, Corpus(), args.big, args.small_tenants, args.small_size)
        print(f"loaded in {loaded:.1f}s, HNSW built in {built:.1f}s", flush=True)
        m = asyncio.run(measure(url, Corpus(), args.queries, args.small_tenants))
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(data_dir, ignore_errors=True)

    print(
        f"\nbig={args.big} small_tenants={args.small_tenants}x{args.small_size} "
        f"queries={args.queries} per kind, dim={DIM} embedder={EMBEDDER.name} "
        f"candidates={APP_CANDIDATES} ef_search={APP_EF_SEARCH} cpus={os.cpu_count()}\n"
    )
    print(
        "| tenant | entries | old p50 / p95 ms | new p50 / p95 ms | old ÷ new p50 "
        "| new: candidate function alone p50 / p95 ms | recall@10 old | recall@10 new "
        "| same top 10 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for kind, size in (("big", args.big), ("small", args.small_size)):
        old, new = m[f"{kind}_old_ms"], m[f"{kind}_new_ms"]
        print(
            f"| {kind} | {size:,} | {_p(old)} | {_p(new)} "
            f"| {pct(old, 50) / pct(new, 50):.1f}× | {_p(m[f'{kind}_fn_ms'])} "
            f"| {statistics.mean(m[f'{kind}_old_recall']):.3f} "
            f"| {statistics.mean(m[f'{kind}_new_recall']):.3f} "
            f"| {statistics.mean(m[f'{kind}_same']):.2f} |"
        )


if __name__ == "__main__":
    main()
