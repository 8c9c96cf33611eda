"""The migrations build the schema the ORM expects, with RLS on every table."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.engine import make_url

from app.auth.principal import Principal
from app.db.engine import Database
from app.db.migrate import head_revision, upgrade_to_head
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


# ---------------------------------------------------------------- on a Supabase database

# Supabase's own definitions (supabase/auth migrations): note `uid()` returns uuid, where the
# shim's returns text.
SUPABASE_AUTH = """
CREATE SCHEMA auth;
CREATE FUNCTION auth.uid() RETURNS uuid LANGUAGE sql STABLE AS $$
  SELECT nullif(
    coalesce(
      current_setting('request.jwt.claim.sub', true),
      (current_setting('request.jwt.claims', true)::jsonb ->> 'sub')
    ),
    ''
  )::uuid
$$;
CREATE FUNCTION auth.role() RETURNS text LANGUAGE sql STABLE AS $$
  SELECT coalesce(
    current_setting('request.jwt.claim.role', true),
    (current_setting('request.jwt.claims', true)::jsonb ->> 'role')
  )::text
$$;
CREATE FUNCTION auth.jwt() RETURNS jsonb LANGUAGE sql STABLE AS $$
  SELECT coalesce(
    nullif(current_setting('request.jwt.claim', true), ''),
    nullif(current_setting('request.jwt.claims', true), '')
  )::jsonb
$$;
"""
AUTH_FUNCTIONS = (
    "SELECT p.proname, p.oid::int, pg_get_function_result(p.oid), p.prosrc FROM pg_proc p "
    "WHERE p.pronamespace = 'auth'::regnamespace ORDER BY p.proname"
)


@pytest.fixture
def empty_db_url(server_url: str) -> Iterator[str]:
    """A new database with nothing in it (not cloned from the migrated template)."""
    name = f"t_empty_{uuid.uuid4().hex[:12]}"
    u = make_url(server_url)
    admin = dict(
        user=u.username,
        password=u.password,
        host=u.host or u.query.get("host"),
        port=u.port,
        autocommit=True,
    )
    with psycopg.connect(dbname=u.database or "postgres", **admin) as conn:  # type: ignore[arg-type]
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield u.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(dbname=u.database or "postgres", **admin) as conn:  # type: ignore[arg-type]
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_migrations_keep_supabase_auth_functions_and_isolate_tenants(
    empty_db_url: str, alice: Principal, mallory: Principal
) -> None:
    u = make_url(empty_db_url)
    with psycopg.connect(
        dbname=u.database,
        user=u.username,
        password=u.password,
        host=u.host or u.query.get("host"),  # type: ignore[arg-type]
        port=u.port,
        autocommit=True,
    ) as conn:
        conn.execute(SUPABASE_AUTH)
        before = conn.execute(AUTH_FUNCTIONS).fetchall()
    assert [(f[0], f[2]) for f in before] == [("jwt", "jsonb"), ("role", "text"), ("uid", "uuid")]

    await asyncio.to_thread(upgrade_to_head, empty_db_url)

    db = Database(empty_db_url, pool_size=2)
    try:
        async with db.owner() as s:
            after = (await s.execute(text(AUTH_FUNCTIONS))).all()
            # Same functions, same oids, same bodies: neither replaced nor added to.
            assert [tuple(f) for f in after] == [tuple(f) for f in before]
            assert (
                await s.scalar(text("SELECT version_num FROM alembic_version"))
            ) == head_revision()
            for tenant in ("acme", "evil"):
                await s.execute(
                    text("INSERT INTO agents (tenant_id, name) VALUES (:t, :t)"), {"t": tenant}
                )

        async with db.tenant(alice) as s:
            assert (await s.scalars(text("SELECT name FROM agents"))).all() == ["acme"]
            assert await s.scalar(text("SELECT public.agent_runtime_tenant_id()")) == "acme"
        async with db.tenant(mallory) as s:
            assert (await s.scalars(text("SELECT name FROM agents"))).all() == ["evil"]
        # Supabase's own uid() works on the same claims (here a uuid subject, as Supabase's are).
        user = uuid.uuid4()
        async with db.tenant(Principal(user_id=str(user), tenant_id="acme")) as s:
            assert await s.scalar(text("SELECT auth.uid()")) == user
            assert (await s.scalars(text("SELECT name FROM agents"))).all() == ["acme"]
    finally:
        await db.dispose()
