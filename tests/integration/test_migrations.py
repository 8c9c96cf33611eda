"""The migrations build the schema the ORM expects, with RLS on every table."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text

from app.db.engine import Database
from app.db.migrate import head_revision
from app.db.models import Base


async def test_orm_matches_migrated_schema(database: Database) -> None:
    def diff(sync_conn):  # type: ignore[no-untyped-def]
        ctx = MigrationContext.configure(
            sync_conn, opts={"compare_type": False, "include_object": _tables_only}
        )
        return compare_metadata(ctx, Base.metadata)

    async with database.engine.connect() as conn:
        changes = await conn.run_sync(diff)
    # Only tables/columns matter here; indexes and constraints are the migration's business.
    structural = [
        c for c in changes if c[0] in ("add_table", "remove_table", "add_column", "remove_column")
    ]
    assert structural == []


def _tables_only(obj, name, type_, reflected, compare_to):  # type: ignore[no-untyped-def]
    return name != "alembic_version"


async def test_every_table_forces_rls(database: Database) -> None:
    async with database.owner() as s:
        rows = (
            await s.execute(
                text(
                    "SELECT relname, relrowsecurity, relforcerowsecurity FROM pg_class "
                    "WHERE relnamespace = 'public'::regnamespace AND relkind = 'r' "
                    "AND relname <> 'alembic_version'"
                )
            )
        ).all()
    assert {r.relname for r in rows} >= {t for t in Base.metadata.tables}
    assert all(r.relrowsecurity and r.relforcerowsecurity for r in rows), rows


async def test_database_is_at_head(database: Database) -> None:
    async with database.owner() as s:
        current = (await s.execute(text("SELECT version_num FROM alembic_version"))).scalar_one()
    assert current == head_revision()
