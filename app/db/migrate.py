"""Apply Alembic migrations programmatically and tell whether a database is current."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

_ROOT = Path(__file__).resolve().parents[2]


def alembic_config(database_url: str) -> Config:
    """An Alembic config pointing at this project's migrations and the given database."""
    cfg = Config(str(_ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(_ROOT / "migrations"))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


def upgrade_to_head(database_url: str) -> None:
    """Apply every pending migration (idempotent)."""
    command.upgrade(alembic_config(database_url), "head")


def head_revision() -> str | None:
    """The newest revision in `migrations/versions`."""
    script = ScriptDirectory.from_config(alembic_config("postgresql://unused/x"))
    return script.get_current_head()


async def current_revision(session: AsyncSession) -> str | None:
    """The revision the database is migrated to (None: never migrated)."""
    if not await session.scalar(text("SELECT to_regclass('alembic_version') IS NOT NULL")):
        return None
    revision: str | None = await session.scalar(text("SELECT version_num FROM alembic_version"))
    return revision
