"""A worker's capacity knobs: its DB pool does not grow with its concurrency, while the model
clients' connection pools do (one stream per concurrent run), and its loop is uvloop."""

from __future__ import annotations

import asyncio
from typing import Any

from app.config import Settings
from app.llm import gemini, openai_compat
from app.worker.main import run_event_loop, worker_pool


def _settings(**overrides: Any) -> Settings:
    return Settings(_env_file=None, **overrides)


def test_db_pool_is_capped_by_worker_db_pool_size_not_concurrency() -> None:
    assert worker_pool(_settings(worker_concurrency=1000, worker_db_pool_size=20)) == (20, 10)
    assert worker_pool(_settings(worker_concurrency=4, worker_db_pool_size=20)) == (6, 3)


async def test_model_clients_hold_a_connection_per_concurrent_run() -> None:
    settings = _settings(
        worker_concurrency=1500, openai_base_url="http://127.0.0.1:9/v1", gemini_api_key="k"
    )
    openai_pool = openai_compat.shared_client(settings).get()._client._transport._pool
    gemini_http = gemini.shared_client(settings).get()._api_client._async_httpx_client
    for pool in (openai_pool, gemini_http._transport._pool):
        assert pool._max_connections > 1500
        assert pool._max_keepalive_connections > 1500


def test_worker_loop_is_uvloop() -> None:
    seen: list[str] = []

    async def main() -> None:
        seen.append(type(asyncio.get_running_loop()).__module__)

    run_event_loop(main())
    assert seen == ["uvloop"]
