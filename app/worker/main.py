"""Entry point of one worker process (`agent-runtime worker`)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any

import structlog

from app.config import Settings
from app.db.engine import Database
from app.worker.worker import Worker

log = structlog.get_logger(__name__)


def run_worker(settings: Settings, *, worker_id: str | None = None) -> None:
    """Run one worker until SIGTERM/SIGINT; then finish or hand back its runs and return."""
    if not settings.database_url:
        raise RuntimeError("run_worker needs settings.database_url (resolved by the CLI)")
    run_event_loop(_main(settings, worker_id))


def run_event_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run `main` on uvloop where it is installed (Linux, macOS), else on asyncio's own loop.

    A worker holding many runs spends much of its CPU in the event loop itself (sockets to the
    database and to the models, timers, task switches), which uvloop does in C."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows has no uvloop
        asyncio.run(main)
    else:
        uvloop.run(main)


def worker_pool(settings: Settings) -> tuple[int, int]:
    """(pool_size, max_overflow) of the worker's connection pool.

    A run holds a connection only while it writes (an event, a transcript row), never while it
    waits on a model or a tool, so the pool is sized by how many writes are in flight at once,
    not by `worker_concurrency`: beyond a few connections per database core, more connections
    only queue inside Postgres instead of inside the pool."""
    size = min(settings.worker_concurrency + 2, settings.worker_db_pool_size)
    return size, size // 2


async def _main(settings: Settings, worker_id: str | None) -> None:
    assert settings.database_url is not None
    pool_size, max_overflow = worker_pool(settings)
    db = Database(settings.database_url, pool_size=pool_size, max_overflow=max_overflow)
    worker = Worker(db, settings, worker_id=worker_id)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.request_stop)
    try:
        await worker.run()
    finally:
        await db.dispose()
