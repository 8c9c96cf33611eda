"""Memory benchmark: HNSW vector search and full hybrid search at 10k and 100k entries.

A synthetic corpus (deterministic: topic vocabularies of pseudo-words, Zipf-ish sampling) is
embedded with the offline embedder (256 dims, two processes), bulk-loaded with COPY into a fresh
database, and the HNSW index is built after loading. Then, as one tenant through RLS like the app:

* ANN: the app's vector-side query (`embedding::vector(256) <=> q`) on the HNSW index with
  iterative scans, fetching the app's 50 candidates, at several `hnsw.ef_search`; recall@10 =
  |10 nearest of those ∩ exact top 10| / 10 (an entry tied with the exact 10th counts as a hit),
  averaged over the queries;
* exact: the same query with `SET LOCAL enable_indexscan = off` (sequential scan, exact order);
* full-text side: the app's text candidates alone (websearch_to_tsquery + ts_rank_cd, top 50);
* hybrid: the whole `search_memories` with the default settings (query embedding, 50 vector + 50
  text candidates, RRF, weights, MMR, access-count update), limit 10;
* app recall@10: the same recall, but of the entries the app's own candidate statement
  (`candidates_sql`, as `search_memories` runs it: the default ef_search, relaxed iterative scan, 50
  vector candidates) ranks 1-10 on its vector side — the vector top 10 the app fuses.

Every latency includes the transaction the app opens (role + JWT claims for RLS). Because the
machines are shared and noisy, the ratio columns divide, query by query, the hybrid search's and
the ANN query's (at the app's ef_search) latency by the exact scan's in the same run, and report
the median of those ratios.

    .venv/bin/python bench/memory/run.py                 # 10k then 100k
    .venv/bin/python bench/memory/run.py --sizes 10000 --queries 50
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

import psycopg
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
    candidates_sql,
    configure_hnsw,
    search_memories,
    text_sql,
    vector_literal,
    vector_sql,
)

DIM = 256
# What search_memories uses by default:
APP_EF_SEARCH: int = Settings.model_fields["memory_hnsw_ef_search"].default
APP_CANDIDATES: int = Settings.model_fields["memory_search_candidates"].default
EMBEDDER = OfflineEmbedder(DIM)
TENANT = Principal(user_id="bench", tenant_id="bench-0")
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


def _connect(url: str) -> psycopg.Connection[Any]:
    u = make_url(url)
    return psycopg.connect(
        dbname=u.database or "postgres",
        user=u.username,
        password=u.password,
        host=u.host or str(u.query.get("host")),
        port=u.port,
        autocommit=True,
    )


def load(url: str, corpus: Corpus, start: int, stop: int, tenants: int) -> tuple[float, float]:
    """Embed and COPY entries [start, stop), then (re)build the HNSW index; (load s, build s)."""
    t0 = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        rows = pool.imap(_embed_row, ((i, corpus.entry(i)) for i in range(start, stop)), 500)
        with _connect(url) as conn:
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
                            f"bench-{i % tenants}",
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
    with _connect(url) as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute("SET max_parallel_maintenance_workers = 1")
        conn.execute(HNSW)
        conn.execute("VACUUM ANALYZE agent_memory_entries")
    return loaded, time.perf_counter() - t1


def _ts(i: int) -> str:
    return f"2025-{1 + i % 12:02d}-{1 + i % 28:02d} 12:00:00+00"


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))]


async def _timed(
    db: Database, sql: Any, params: dict[str, Any], setup: list[str]
) -> tuple[float, list[Any]]:
    t = time.perf_counter()
    async with db.tenant(TENANT) as s:
        for statement in setup:
            await s.execute(text(statement))
        rows = (await s.execute(sql, params)).all()
    ms = (time.perf_counter() - t) * 1000
    if rows and "distance" in rows[0]._fields:  # best first (relaxed_order may emit out of order)
        return ms, sorted(r.distance for r in rows)
    return ms, [r.id for r in rows]


def _recall(ann: list[float], exact: list[float], k: int = 10) -> float:
    """Share of the ANN top k at least as near as the exact k-th (ties count as hits)."""
    if not exact:
        return 1.0
    bound = exact[min(k, len(exact)) - 1] + 1e-6
    return sum(1 for d in ann[:k] if d <= bound) / min(k, len(exact))


async def _app_vector_top10(db: Database, params: dict[str, Any]) -> list[float]:
    """Distances of the entries the app's candidate statement ranks 1-10 on its vector side."""
    async with db.tenant(TENANT) as s:
        await configure_hnsw(s, APP_EF_SEARCH)
        rows = (await s.execute(text(candidates_sql(DIM)), params)).all()
    ranked = sorted((r.vector_rank, 1.0 - r.vector_similarity) for r in rows if r.vector_rank)
    return [distance for rank, distance in ranked if rank <= 10]


async def measure(
    url: str, corpus: Corpus, queries: int, efs: list[int], candidates: int
) -> dict[str, Any]:
    """Latencies (ms): ANN per ef_search (with recall@10 against exact), exact, full text, hybrid.

    Also the app's own recall@10 and, per query, hybrid/exact and ANN/exact latency ratios.
    """
    db = Database(url, pool_size=2)
    vector = text(vector_sql(DIM))
    fulltext = text(text_sql(DIM))
    out: dict[str, Any] = {"exact": [], "text": [], "hybrid": [], "app_recall": []}
    out |= {"hybrid_ratio": [], "ann_ratio": []}
    out |= {f"ann{ef}": [] for ef in efs} | {f"recall{ef}": [] for ef in efs}
    try:
        for i in range(queries):
            query = corpus.query(i)
            params = {
                "qvec": vector_literal(hash_embed(query, DIM)),
                "embedder": EMBEDDER.name,
                "candidates": 10,
                "query": query,
            }
            exact_ms, exact = await _timed(db, vector, params, ["SET LOCAL enable_indexscan = off"])
            out["exact"].append(exact_ms)
            for ef in efs:
                setup = [
                    f"SET LOCAL hnsw.ef_search = {ef}",
                    "SET LOCAL hnsw.iterative_scan = relaxed_order",
                ]
                ms, ann = await _timed(db, vector, params | {"candidates": candidates}, setup)
                out[f"ann{ef}"].append(ms)
                out[f"recall{ef}"].append(_recall(ann, exact))
                if ef == APP_EF_SEARCH:
                    out["ann_ratio"].append(ms / exact_ms)
            ms, _ = await _timed(db, fulltext, params | {"candidates": 50}, [])
            out["text"].append(ms)
            t = time.perf_counter()
            await search_memories(  # the app's defaults
                db,
                TENANT,
                EMBEDDER,
                query,
                limit=10,
                candidates=APP_CANDIDATES,
                ef_search=APP_EF_SEARCH,
            )
            ms = (time.perf_counter() - t) * 1000
            out["hybrid"].append(ms)
            out["hybrid_ratio"].append(ms / exact_ms)
            app_params = params | {"candidates": APP_CANDIDATES, "agent_id": None, "tags": []}
            out["app_recall"].append(_recall(await _app_vector_top10(db, app_params), exact))
    finally:
        await db.dispose()
    return out


def _p(values: list[float]) -> str:
    return f"{_pct(values, 50):.1f} / {_pct(values, 95):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000", help="cumulative entry counts")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--ef-search",
        default="40,100,200",
        help=f"hnsw.ef_search values (include the app's {APP_EF_SEARCH} for the ANN ratio)",
    )
    parser.add_argument("--tenants", type=int, default=1, help="spread entries over N tenants")
    parser.add_argument(
        "--candidates", type=int, default=50, help="vector candidates fetched (the app's default)"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    efs = [int(e) for e in args.ef_search.split(",")]

    data_dir = Path(tempfile.mkdtemp(prefix="artm-", dir="/tmp"))
    pg = None
    server_url = os.environ.get("DATABASE_URL")
    if not server_url:
        pg = EmbeddedPostgres(data_dir)
        server_url = pg.start()
    rows: list[str] = []
    try:
        with _connect(server_url) as conn:
            conn.execute("DROP DATABASE IF EXISTS bench_memory WITH (FORCE)")
            conn.execute("CREATE DATABASE bench_memory")
        url = (
            make_url(server_url).set(database="bench_memory").render_as_string(hide_password=False)
        )
        upgrade_to_head(url)
        corpus = Corpus()
        done = 0
        for size in sizes:
            loaded, built = load(url, corpus, done, size, args.tenants)
            done = size
            print(
                f"{size} entries: loaded in {loaded:.1f}s, HNSW built in {built:.1f}s", flush=True
            )
            m = asyncio.run(measure(url, corpus, args.queries, efs, args.candidates))
            ann = " | ".join(
                f"{_p(m[f'ann{ef}'])} ({statistics.mean(m[f'recall{ef}']):.3f})" for ef in efs
            )
            ann_ratio = f"{statistics.median(m['ann_ratio']):.2f}" if m["ann_ratio"] else "n/a"
            rows.append(
                f"| {size:,} | {loaded:.0f} / {built:.0f} | {ann} | {_p(m['exact'])} "
                f"| {_p(m['text'])} | {_p(m['hybrid'])} "
                f"| {statistics.mean(m['app_recall']):.3f} "
                f"| {statistics.median(m['hybrid_ratio']):.2f} | {ann_ratio} |"
            )
            print(rows[-1], flush=True)
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(data_dir, ignore_errors=True)

    print(
        f"\nqueries={args.queries} tenants={args.tenants} dim={DIM} embedder={EMBEDDER.name} "
        f"ann_candidates={args.candidates} cpus={os.cpu_count()}\n"
    )
    ann_heads = " | ".join(f"ANN ef_search={ef}: p50 / p95 ms (recall@10)" for ef in efs)
    print(
        f"| entries | load / HNSW build (s) | {ann_heads} | exact top-10 p50 / p95 ms "
        "| full-text side p50 / p95 ms | hybrid search p50 / p95 ms "
        "| app vector top-10 recall@10 | hybrid ÷ exact (median) "
        f"| ANN ef={APP_EF_SEARCH} ÷ exact (median) |"
    )
    print("|---" * (9 + len(efs) - 1) + "|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
