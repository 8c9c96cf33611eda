"""Test fixtures: a real Postgres (embedded unless DATABASE_URL is set), one fresh database per test.

The schema is migrated once into a template database; each test gets `CREATE DATABASE ... TEMPLATE`,
which is cheap and fully isolated (the procrastinate approach).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

# No test may reach a real model provider or pick up a developer's configuration: the settings
# file is ignored (read when app.config is imported, so this comes first), and the environment
# loses every setting but DATABASE_URL and every SDK variable. Server and worker processes
# started by end-to-end tests inherit this environment.
os.environ["AGENT_RUNTIME_ENV_FILE"] = ""

import psycopg
import pytest
from sqlalchemy.engine import make_url

from app.auth.principal import Principal
from app.config import Settings
from app.core.events import RUN_EVENT_ADAPTER
from app.db.engine import Database
from app.db.migrate import upgrade_to_head

TEMPLATE_DB = f"agent_runtime_test_template_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
"""One template per pytest-xdist worker (they may share a server when DATABASE_URL is set)."""
_KEPT = {"DATABASE_URL", "AGENT_RUNTIME_ENV_FILE"}
_SDK_PREFIXES = ("GOOGLE_", "GEMINI_", "OPENAI_", "VERTEX")

for _name in list(os.environ):
    if _name in _KEPT:
        continue
    if _name.lower() in Settings.model_fields or _name.startswith(_SDK_PREFIXES):
        del os.environ[_name]


def _with_database(url: str, name: str) -> str:
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def _admin_conn(url: str) -> psycopg.Connection:
    u = make_url(url)
    return psycopg.connect(
        dbname=u.database or "postgres",
        user=u.username,
        password=u.password,
        host=u.host or u.query.get("host"),  # type: ignore[arg-type]
        port=u.port,
        autocommit=True,
    )


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """URL of the test Postgres server (its maintenance database)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    from app.db.embedded import EmbeddedPostgres

    data_dir = Path(tempfile.mkdtemp(prefix="art-", dir="/tmp"))
    pg = EmbeddedPostgres(data_dir)
    started = pg.start()
    os.environ["AGENT_RUNTIME_TEST_SERVER_URL"] = started
    try:
        yield started
    finally:
        pg.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def template_url(server_url: str) -> str:
    """A migrated template database (created once per test session)."""
    with _admin_conn(server_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{TEMPLATE_DB}"')
    url = _with_database(server_url, TEMPLATE_DB)
    upgrade_to_head(url)
    return url


def _fresh_database(server_url: str) -> Iterator[str]:
    """A database cloned from the migrated template; its stored events checked, then dropped."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    with _admin_conn(server_url) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE_DB}"')
    url = _with_database(server_url, name)
    try:
        yield url
        check_stored_events(url)
    finally:
        with _admin_conn(server_url) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db_url(server_url: str, template_url: str) -> Iterator[str]:
    """URL of a fresh, migrated database for this test only."""
    yield from _fresh_database(server_url)


@pytest.fixture(scope="module")
def module_db_url(server_url: str, template_url: str) -> Iterator[str]:
    """URL of a fresh, migrated database shared by the tests of one module (each test then
    keeps to its own tenant: see `shared_stack` in tests/e2e/conftest.py)."""
    yield from _fresh_database(server_url)


def check_stored_events(url: str) -> None:
    """Every event the test stored is exactly one of the `RunEvent` types: validated strictly,
    envelope included, so an undeclared or mistyped field fails the test that produced it."""
    with _admin_conn(url) as conn:
        rows = conn.execute(
            "SELECT run_id, seq, type, data, created_at FROM run_events ORDER BY run_id, seq"
        ).fetchall()
    problems = []
    for run_id, seq, type_, data, ts in rows:
        wire = {**data, "type": type_, "runId": str(run_id), "seq": seq, "ts": ts.isoformat()}
        try:
            RUN_EVENT_ADAPTER.validate_json(json.dumps(wire), strict=True)
        except ValueError as exc:
            problems.append(f"run {run_id} seq {seq} {type_} {data}: {exc}")
    assert not problems, "stored events that are not RunEvents:\n" + "\n".join(problems)


@pytest.fixture
async def database(db_url: str) -> AsyncIterator[Database]:
    """The app's Database over this test's fresh database."""
    db = Database(db_url, pool_size=5)
    try:
        yield db
    finally:
        await db.dispose()


@pytest.fixture
def alice() -> Principal:
    """The owner of tenant `acme`."""
    return Principal(user_id="alice", tenant_id="acme", role="owner")


@pytest.fixture
def mallory() -> Principal:
    """The owner of another tenant, `evil`."""
    return Principal(user_id="mallory", tenant_id="evil", role="owner")
