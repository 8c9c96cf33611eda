"""The worker, its LISTEN connection and its heartbeat through a database outage.

An outage is made for real: the test database stops accepting connections
(`ALLOW_CONNECTIONS false`, which binds superusers too) and every backend connected to it is
killed with `pg_terminate_backend`, as a restart or a failover would. Nothing is mocked.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from uuid import UUID

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from app.auth.principal import Principal
from app.db.engine import Database
from app.db.listen import Listener
from app.queue.lease import LeasedRun
from app.queue.manager import RunQueue
from app.worker.heartbeat import Heartbeat
from app.worker.worker import backoff_seconds, is_transient_db_error
from tests.integration.test_worker import (
    Script,
    event_types,
    running_worker,
    settings_for,
    wait_status,
)


class Outage:
    """Switches the test database off and on, from the server's maintenance database."""

    def __init__(self, server_url: str, db_url: str) -> None:
        u = make_url(server_url)
        self.dbname = make_url(db_url).database
        self._conn = psycopg.connect(
            dbname=u.database or "postgres",
            user=u.username,
            password=u.password,
            host=u.host or u.query.get("host"),  # type: ignore[arg-type]
            port=u.port,
            autocommit=True,
        )

    def terminate(self, where: str = "true") -> int:
        """Kill the backends connected to the test database (those matching `where`)."""
        row = self._conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "  # noqa: S608
            f"WHERE datname = %s AND pid <> pg_backend_pid() AND ({where})",
            (self.dbname,),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def begin(self) -> None:
        """Refuse new connections, then kill the existing ones."""
        self._conn.execute(f'ALTER DATABASE "{self.dbname}" WITH ALLOW_CONNECTIONS false')
        self.terminate()

    def end(self) -> None:
        self._conn.execute(f'ALTER DATABASE "{self.dbname}" WITH ALLOW_CONNECTIONS true')

    def close(self) -> None:
        self.end()
        self._conn.close()


@pytest.fixture
def outage(server_url: str, db_url: str) -> Iterator[Outage]:
    o = Outage(server_url, db_url)
    try:
        yield o
    finally:
        o.close()  # never leave the database refusing connections (its DROP would fail)


async def eventually(predicate: Callable[[], object], timeout: float = 10) -> None:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_worker_keeps_claiming_through_a_database_outage(
    database: Database, db_url: str, alice: Principal, outage: Outage
) -> None:
    script = Script()
    queue = RunQueue(database)
    before = await queue.enqueue_run(alice, message="before")
    # A short poll, so that the worker tries to claim while the database is away.
    settings = settings_for(db_url, poll_seconds=0.2)
    async with running_worker(database, settings, script, "w1") as worker:
        await wait_status(database, alice, before.run_id, {"completed"})

        outage.begin()
        await eventually(lambda: worker.claim_failures >= 2)  # claims failed, and were retried
        outage.end()

        after = await queue.enqueue_run(alice, message="after")
        await wait_status(database, alice, after.run_id, {"completed"}, timeout=30)
        assert worker.claim_failures == 0
    assert [run_id for run_id, _ in script.calls] == [before.run_id, after.run_id]


async def test_a_run_cut_off_by_a_dropped_connection_is_resumed_not_failed(
    database: Database, db_url: str, alice: Principal
) -> None:
    attempts: list[int] = []

    async def execute(leased: LeasedRun) -> None:
        attempts.append(leased.run.attempt)
        if leased.run.attempt == 1:  # this connection dies mid-run, as in a failover
            async with leased.db.owner() as s:
                await s.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))
        await leased.finish("completed", result={"text": "done"})

    queue = RunQueue(database)
    run = await queue.enqueue_run(alice, message="hi")
    async with running_worker(database, settings_for(db_url), execute, "w1"):
        await wait_status(database, alice, run.run_id, {"completed", "failed"})
    assert await wait_status(database, alice, run.run_id, {"completed"}) == "completed"
    assert attempts == [1, 2]
    assert await event_types(database, alice, run.run_id) == [
        "run.queued",
        "run.started",
        "run.requeued",
        "run.resumed",
        "run.completed",
    ]


async def test_database_errors_hand_a_run_back_only_up_to_max_run_attempts(
    database: Database, db_url: str, alice: Principal
) -> None:
    """A run whose every attempt meets a "transient" database error is not handed back forever:
    from its MAX_RUN_ATTEMPTS-th claim on, the error fails it."""
    attempts: list[int] = []

    async def execute(leased: LeasedRun) -> None:
        attempts.append(leased.run.attempt)
        async with leased.db.owner() as s:
            await s.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))

    queue = RunQueue(database)
    run = await queue.enqueue_run(alice, message="hi")
    settings = settings_for(db_url, max_run_attempts=2)
    async with running_worker(database, settings, execute, "w1"):
        assert await wait_status(database, alice, run.run_id, {"completed", "failed"}) == "failed"
    assert attempts == [1, 2]
    assert await event_types(database, alice, run.run_id) == [
        "run.queued",
        "run.started",
        "run.requeued",
        "run.resumed",
        "run.failed",
    ]


async def test_listener_reconnects_after_an_outage_and_delivers_again(
    database: Database, db_url: str, outage: Outage
) -> None:
    received: list[str] = []
    reconnects: list[float] = []
    listener = Listener(db_url, {"resilience_test": received.append})
    listener.on_reconnect = lambda: reconnects.append(time.monotonic())
    await listener.start()
    try:
        outage.begin()
        await asyncio.sleep(1.0)  # several refused reconnects
        outage.end()
        await eventually(lambda: reconnects)
        async with database.owner() as s:
            await s.execute(text("SELECT pg_notify('resilience_test', 'hello again')"))
        await eventually(lambda: received == ["hello again"])
    finally:
        await listener.stop()


class _DropMidSetup(dict[str, object]):
    """Channels whose second LISTEN setup is cut off: after the first channel is listened to,
    the listener's new backend is terminated, so the next LISTEN meets a dead connection."""

    def __init__(self, outage: Outage, callbacks: dict[str, object]) -> None:
        super().__init__(callbacks)
        self.outage = outage
        self.setups = 0

    def items(self) -> Iterator[tuple[str, object]]:  # type: ignore[override]
        self.setups += 1
        for n, item in enumerate(super().items()):
            if self.setups == 2 and n == 1:
                killed = self.outage.terminate("starts_with(query, 'LISTEN')")
                assert killed == 1
                time.sleep(0.2)  # noqa: ASYNC251 -- let the backend exit before the next LISTEN
            yield item


async def test_listener_survives_a_connection_dropped_while_it_sets_up_listen(
    database: Database, db_url: str, outage: Outage
) -> None:
    received: list[str] = []
    channels = _DropMidSetup(
        outage, {"first_chan": received.append, "second_chan": received.append}
    )
    reconnects: list[float] = []
    listener = Listener(db_url, channels)  # type: ignore[arg-type]
    listener.on_reconnect = lambda: reconnects.append(time.monotonic())
    await listener.start()
    try:
        assert (
            outage.terminate("starts_with(query, 'LISTEN')") == 1
        )  # 1st drop: reconnect, then 2nd
        await eventually(lambda: reconnects)
        assert channels.setups == 3  # the setup that was cut off was retried
        async with database.owner() as s:
            await s.execute(text("SELECT pg_notify('first_chan', 'still listening')"))
        await eventually(lambda: received == ["still listening"])
    finally:
        await listener.stop()


async def test_heartbeat_thread_survives_an_outage(
    database: Database, db_url: str, outage: Outage
) -> None:
    held: list[UUID] = []
    heartbeat = Heartbeat(
        database_url=db_url,
        worker_id="hb",
        lease_seconds=3,
        interval=0.1,
        max_run_attempts=5,
        held_runs=lambda: held,
        on_cancel=lambda _r: None,
        on_lost=lambda _r: None,
    )
    heartbeat.start()
    try:
        await eventually(lambda: heartbeat.beats >= 2)
        outage.begin()
        await asyncio.sleep(0.3)  # let any beat in flight finish
        during = heartbeat.beats
        await asyncio.sleep(1.0)
        assert heartbeat.beats == during, "beats succeeded while the database was away"
        outage.end()
        await eventually(lambda: heartbeat.beats >= during + 2)
        assert heartbeat.is_alive()
    finally:
        heartbeat.stop()
        await asyncio.to_thread(heartbeat.join, 5)


def test_backoff_doubles_up_to_a_cap() -> None:
    for failures, nominal in [(1, 0.5), (2, 1.0), (3, 2.0), (5, 8.0), (6, 15.0), (1000, 15.0)]:
        assert 0.8 * nominal <= backoff_seconds(failures) <= 1.2 * nominal


async def test_query_bugs_are_not_mistaken_for_outages(database: Database) -> None:
    with pytest.raises(Exception) as raised:  # noqa: PT011
        async with database.owner() as s:
            await s.execute(text("SELECT * FROM no_such_table"))
    assert not is_transient_db_error(raised.value)
