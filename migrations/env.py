"""Alembic environment: migrations run over a synchronous psycopg connection as the schema owner."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from app.db.urls import sync_url

config = context.config


def run_migrations_online() -> None:
    """Apply migrations to the database named by `sqlalchemy.url` (set by app.db.migrate)."""
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database URL: run migrations through `agent-runtime migrate`")
    engine = create_engine(sync_url(url), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("offline (--sql) migrations are not supported")
run_migrations_online()
