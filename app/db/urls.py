"""Conversions between the one DATABASE_URL users set and the driver-specific URLs we need."""

from __future__ import annotations

from sqlalchemy.engine import make_url


def _with_driver(url: str, driver: str) -> str:
    parsed = make_url(url)
    return parsed.set(drivername=f"postgresql+{driver}").render_as_string(hide_password=False)


def async_url(url: str) -> str:
    """SQLAlchemy URL for the app's asyncpg engine."""
    return _with_driver(url, "asyncpg")


def sync_url(url: str) -> str:
    """SQLAlchemy URL for Alembic's synchronous psycopg connection."""
    return _with_driver(url, "psycopg")


def asyncpg_dsn(url: str) -> str:
    """Plain `postgresql://` DSN for raw asyncpg connections (LISTEN, heartbeats)."""
    return _with_driver(url, "asyncpg").replace("postgresql+asyncpg://", "postgresql://", 1)


def redact(url: str) -> str:
    """The URL with its password hidden, for logs."""
    return make_url(url).render_as_string(hide_password=True)
