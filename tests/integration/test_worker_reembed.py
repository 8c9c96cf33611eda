"""The worker's `memory-reembed` side task: memory stored under one embedder is re-embedded by the
workers once the configured embedder changes, and the task ends with the worker."""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import text

from app.auth.principal import Principal
from app.db.engine import Database
from app.memory.embedders import OfflineEmbedder
from app.memory.store import MemoryStore
from app.queue.manager import RunQueue
from tests.integration.test_worker import Script, running_worker, settings_for, wait_status


async def embedders_of(database: Database) -> dict[tuple[str | None, int | None], int]:
    async with database.owner() as s:
        rows = await s.execute(
            text(
                "SELECT embedder, embedding_dim, count(*) AS n FROM agent_memory_entries "
                "GROUP BY embedder, embedding_dim"
            )
        )
        return {(r.embedder, r.embedding_dim): r.n for r in rows}


def reembed_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == "memory-reembed" and not t.done()]


async def test_workers_reembed_memory_after_the_embedder_changes(
    database: Database, db_url: str, alice: Principal, mallory: Principal
) -> None:
    old = MemoryStore(database, OfflineEmbedder(256))
    for i in range(30):
        await old.create(alice if i % 2 else mallory, f"note number {i} about the garden")
    assert await embedders_of(database) == {("offline:hash-v1", 256): 30}

    # Same embedder, another dimension: every entry is stale for these workers.
    settings = settings_for(
        db_url,
        memory_embedder="offline",
        memory_embedding_dim=768,
        memory_reembed_batch=4,
        memory_reembed_interval_seconds=30.0,  # the first round starts at once; no waiting on it
    )
    script = Script()
    async with (
        running_worker(database, settings, script, "w1"),
        running_worker(database, settings, script, "w2"),  # two at once share the work safely
    ):
        assert len(reembed_tasks()) == 2
        deadline = time.monotonic() + 20
        while await embedders_of(database) != {("offline:hash-v1", 768): 30}:
            assert time.monotonic() < deadline, await embedders_of(database)
            await asyncio.sleep(0.1)
    assert reembed_tasks() == [], "the re-embed task outlived its worker"


async def test_a_misconfigured_embedder_does_not_stop_the_worker(
    database: Database, db_url: str, alice: Principal
) -> None:
    settings = settings_for(
        db_url,
        memory_embedder="gemini:gemini-embedding-001",
        gemini_api_key=None,
        google_api_key=None,
        google_genai_use_vertexai=False,
    )
    script = Script()
    run = await RunQueue(database).enqueue_run(alice, message="hello")
    async with running_worker(database, settings, script, "w1"):
        await wait_status(database, alice, run.run_id, {"completed"})
        assert reembed_tasks() == []
