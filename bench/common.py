"""What every bench shares: a free local TCP port, an autocommit connection to a database URL
(host or a `?host=/socket/dir` query, as the embedded Postgres gives), percentiles."""

from __future__ import annotations

import socket
from typing import Any

import psycopg
from sqlalchemy.engine import make_url


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def connect(
    url: str, dbname: str | None = None, *, application_name: str | None = None
) -> psycopg.Connection[Any]:
    """An autocommit psycopg connection to `url`'s server, to `dbname` (default: the URL's
    database, else `postgres`)."""
    u = make_url(url)
    host = u.host or u.query.get("host")
    extra = {"application_name": application_name} if application_name else {}
    return psycopg.connect(
        dbname=dbname or u.database or "postgres",
        user=u.username,
        password=u.password,
        host=str(host) if host else None,
        port=u.port,
        autocommit=True,
        **extra,
    )


def pct(values: list[float], p: float) -> float:
    """The `p`-th percentile of `values` (nearest rank; NaN for none)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))]
