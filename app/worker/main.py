"""Entry point of one worker process (`agent-runtime worker`)."""

from __future__ import annotations

import asyncio
import signal

import structlog

from app.config import Settings
from app.db.engine import Database
from app.worker.worker import Worker

log = structlog.get_logger(__name__)


def run_worker(settings: Settings, *, worker_id: str | None = None) -> None:
    """Run one worker until SIGTERM/SIGINT; then finish or hand back its runs and return."""
    if not settings.database_url:
        raise RuntimeError("run_worker needs settings.database_url (resolved by the CLI)")
    asyncio.run(_main(settings, worker_id))


async def _main(settings: Settings, worker_id: str | None) -> None:
    assert settings.database_url is not None
    db = Database(settings.database_url, pool_size=min(settings.worker_concurrency + 2, 20))
    worker = Worker(db, settings, worker_id=worker_id)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.request_stop)
    try:
        await worker.run()
    finally:
        await db.dispose()
