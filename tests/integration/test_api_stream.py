"""SSE: replay, resume without gap or duplicate, live delivery, end on terminal, keep-alive,
disconnect, one shared LISTEN connection and one shared read for every stream, tenant isolation."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text

from app.api import hub_reader, run_feed
from app.api.run_feed import follow_run
from app.auth.principal import Principal
from app.core.events import AssistantDeltaEvent
from app.db import listen
from app.db.engine import Database
from app.queue.lease import LeasedRun
from tests.integration.api_support import Api, Frame, auth, error_of, make_settings, running_api

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def api(database: Database, db_url: str) -> AsyncIterator[Api]:
    async with running_api(make_settings(db_url, sse_keepalive_seconds=0.3), database) as api:
        yield api


async def start_run(api: Api, message: str = "hi", **body: Any) -> tuple[str, LeasedRun]:
    """Enqueue a run and claim it as a fake worker."""
    run = await api.post_run(message, **body)
    claimed = await api.runtime.queue.claim_next("w", 30)
    assert claimed is not None and str(claimed.id) == run["runId"]
    return run["runId"], LeasedRun(api.runtime.db, claimed, "w")


async def finished_run(api: Api, deltas: int = 3) -> str:
    """A completed run with events 1 (queued), 2 (started: stored by the claim), deltas…,
    completed."""
    run_id, leased = await start_run(api)
    for i in range(deltas):
        await leased.emit(AssistantDeltaEvent(text=f"d{i}"))
    await leased.finish("completed", result={"text": "done"})
    return run_id


def seqs(frames: list[Frame]) -> list[int]:
    """The ids of event frames, checking that id, event and data agree."""
    out = []
    for f in frames:
        assert f.data is not None and f.id is not None
        data = json.loads(f.data)
        assert data["seq"] == int(f.id) and data["type"] == f.event
        out.append(int(f.id))
    return out


async def read_stream(
    api: Api, run_id: str, headers: dict[str, str] | None = None, **params: str
) -> list[Frame]:
    async with api.stream({"runId": run_id, **params}, {**auth(), **(headers or {})}) as conn:
        assert conn.status == 200, conn.body
        assert conn.headers["content-type"].startswith("text/event-stream")
        return await conn.read_to_end()


async def test_replays_stored_events_and_ends_after_terminal(api: Api) -> None:
    run_id = await finished_run(api, deltas=3)
    frames = await read_stream(api, run_id)
    assert seqs(frames) == [1, 2, 3, 4, 5, 6]
    assert [f.event for f in frames] == [
        "run.queued",
        "run.started",
        "assistant.delta",
        "assistant.delta",
        "assistant.delta",
        "run.completed",
    ]
    last = json.loads(frames[-1].data or "")
    assert last["result"] == {"text": "done"} and last["runId"] == run_id and "ts" in last
    assert json.loads(frames[0].data or "")["status"] == "queued"


async def test_resume_after_last_event_id_header_and_query(api: Api) -> None:
    run_id = await finished_run(api, deltas=4)
    full = await read_stream(api, run_id)
    assert seqs(full) == list(range(1, 8))

    after_header = await read_stream(api, run_id, {"Last-Event-ID": "2"})
    assert seqs(after_header) == [3, 4, 5, 6, 7]
    assert [f.data for f in after_header] == [f.data for f in full[2:]]  # identical events

    after_query = await read_stream(api, run_id, lastEventId="5")
    assert seqs(after_query) == [6, 7]
    both = await read_stream(api, run_id, {"Last-Event-ID": "1"}, lastEventId="4")
    assert seqs(both) == [5, 6, 7]  # the query parameter wins
    assert await read_stream(api, run_id, lastEventId="7") == []  # nothing after the terminal
    assert seqs(await read_stream(api, run_id, lastEventId="0")) == list(range(1, 8))


@pytest.mark.parametrize(
    ("params", "headers", "field"),
    [
        ({"lastEventId": "abc"}, {}, "lastEventId"),
        ({"lastEventId": "-1"}, {}, "lastEventId"),
        ({"lastEventId": "1.5"}, {}, "lastEventId"),
        ({"lastEventId": "1_0"}, {}, "lastEventId"),
        ({"lastEventId": "2147483648"}, {}, "lastEventId"),
        ({"lastEventId": "99999999999999999999"}, {}, "lastEventId"),
        ({}, {"Last-Event-ID": "x"}, "Last-Event-ID"),
        ({}, {"Last-Event-ID": "-3"}, "Last-Event-ID"),
    ],
)
async def test_bad_resume_position_is_422(
    api: Api, params: dict[str, str], headers: dict[str, str], field: str
) -> None:
    run = await api.post_run()
    r = await api.client.get(
        "/api/agent-runtime/stream",
        params={"runId": run["runId"], **params},
        headers={**auth(), **headers},
    )
    assert r.status_code == 422
    assert error_of(r)["field"] == field and field in error_of(r)["message"]


async def test_live_events_are_delivered_promptly_and_stream_ends(api: Api) -> None:
    api.runtime.hub.poll_seconds = 30  # only a NOTIFY wake-up can deliver within the test
    run_id, leased = await start_run(api)
    async with api.stream({"runId": run_id}, auth()) as conn:
        first = await conn.next_event()
        assert first is not None and first.id == "1"
        second = await conn.next_event()  # stored by the claim
        assert second is not None and (second.id, second.event) == ("2", "run.started")
        await leased.emit(AssistantDeltaEvent(text="a"))
        third = await conn.next_event(wait=3)
        assert third is not None and (third.id, third.event) == ("3", "assistant.delta")
        await leased.emit(AssistantDeltaEvent(text="b"))
        await leased.finish("completed", result={"text": "ab"})
        rest = await conn.read_to_end(wait=3)
        assert seqs(rest) == [4, 5] and rest[-1].event == "run.completed"
        assert conn.ended
    assert api.runtime.hub.subscriber_count() == 0


async def test_cancelling_a_queued_run_ends_its_stream(api: Api) -> None:
    run = await api.post_run()
    async with api.stream({"runId": run["runId"]}, auth()) as conn:
        assert (await conn.next_event()) is not None
        r = await api.client.post(
            "/api/agent-runtime/cancel", params={"runId": run["runId"]}, headers=auth()
        )
        assert r.json()["status"] == "cancelled"
        rest = await conn.read_to_end(wait=3)
        assert [f.event for f in rest] == ["run.cancelled"] and conn.ended


async def test_keepalive_comment_when_idle_and_disconnect_stops_the_stream(api: Api) -> None:
    run = await api.post_run()
    async with api.stream({"runId": run["runId"]}, auth()) as conn:
        first = await conn.next_frame()
        assert first is not None and first.id == "1"
        ping = await conn.next_frame(wait=2)
        assert ping is not None and ping.data is None and ping.comments  # ": ping - …"
        assert api.runtime.hub.subscriber_count() == 1
        conn.disconnect()
        assert conn.task is not None
        await asyncio.wait_for(conn.task, 2)  # the server stops streaming on its own
    assert api.runtime.hub.subscriber_count() == 0


async def test_no_gap_or_duplicate_while_events_race_with_connects(api: Api) -> None:
    """Streams connect (with various resume points) while a writer emits: each must get
    exactly the events after its resume point, in order, ending at the terminal one."""
    api.runtime.hub.poll_seconds = 30  # a missed wake-up would hang a reader: no safety net
    run_id, leased = await start_run(api)
    total = 40

    async def writer() -> None:
        for i in range(total):
            await leased.emit(AssistantDeltaEvent(text=str(i)))
            if i % 5 == 0:
                await asyncio.sleep(0.01)
        await leased.finish("completed", result={"text": "x"})

    async def reader(delay: float, after: int) -> list[int]:
        await asyncio.sleep(delay)
        return seqs(await read_stream(api, run_id, lastEventId=str(after)))

    readers = [reader(0.005 * i, after) for i, after in enumerate([0, 1, 3, 7, 12, 20, 0, 5])]
    results = await asyncio.gather(writer(), *readers)
    last = total + 3  # queued + started + deltas + completed
    for after, got in zip([0, 1, 3, 7, 12, 20, 0, 5], results[1:], strict=True):
        assert got == list(range(after + 1, last + 1)), (after, got)


async def test_concurrent_streams_share_one_listen_connection(api: Api, database: Database) -> None:
    runs = [await api.post_run(f"m{i}") for i in range(3)]
    conns = [api.stream({"runId": r["runId"]}, auth()) for r in runs for _ in range(3)]
    for conn in conns:
        await conn.__aenter__()
        assert await conn.next_event() is not None
    try:
        assert api.runtime.hub.subscriber_count() == 9
        assert api.runtime.hub.subscriber_count(uuid.UUID(runs[0]["runId"])) == 3
        async with database.owner() as s:
            listeners = await s.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND query ILIKE 'LISTEN%'"
                )
            )
        assert listeners == 1
    finally:
        for conn in conns:
            await conn.__aexit__(None, None, None)
    assert api.runtime.hub.subscriber_count() == 0


async def test_listener_reconnect_wakes_streams(
    api: Api, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event committed while the LISTEN connection is down is never notified; the hub's
    wake-up on reconnect must deliver it (the fallback poll is out of reach here)."""
    api.runtime.hub.poll_seconds = 30

    async def slow_connect(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.5)  # keep the listener down while the test commits an event
        return await asyncpg.connect(*args, **kwargs)

    monkeypatch.setattr(
        listen,
        "asyncpg",
        SimpleNamespace(connect=slow_connect, PostgresError=asyncpg.PostgresError),
    )
    run_id, leased = await start_run(api)
    async with api.stream({"runId": run_id}, auth()) as conn:
        assert (await conn.next_event()) is not None
        assert (await conn.next_event()) is not None  # run.started, stored by the claim
        async with database.owner() as s:
            await s.execute(
                text(
                    "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND query ILIKE 'LISTEN%'"
                )
            )
        await leased.emit(AssistantDeltaEvent(text="a"))  # nobody listens
        frame = await conn.next_event(wait=5)
        assert frame is not None and frame.id == "3"
        await leased.finish("completed", result={"text": "x"})
        assert seqs(await conn.read_to_end()) == [4]  # and the new connection is listening


async def test_stream_polls_when_the_listener_is_down(database: Database, db_url: str) -> None:
    """With LISTEN unavailable, the fallback poll still delivers every event."""
    async with running_api(make_settings(db_url), database) as api:
        await api.runtime.hub.stop()
        api.runtime.hub.poll_seconds = 0.05
        run_id, leased = await start_run(api)
        async with api.stream({"runId": run_id}, auth()) as conn:
            assert (await conn.next_event()) is not None
            await leased.emit(AssistantDeltaEvent(text="a"))
            await leased.finish("failed", error={"code": "x", "message": "y"})
            rest = await conn.read_to_end(wait=2)
            assert [f.event for f in rest] == ["run.started", "assistant.delta", "run.failed"]


async def test_live_streams_of_a_run_are_served_by_the_hub_without_reading_themselves(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once caught up, streams get their events from the hub's shared read: each of three
    streams of one run reads the database once (its catch-up under its own principal), however
    many events follow, and each gets every event in order."""
    api.runtime.hub.poll_seconds = 30  # no fallback poll: only NOTIFY + the shared read deliver
    reads: list[int] = []
    own_read = run_feed._read

    async def counted(*args: Any) -> Any:
        reads.append(args[-1])
        return await own_read(*args)

    monkeypatch.setattr(run_feed, "_read", counted)
    run_id, leased = await start_run(api)
    async with contextlib.AsyncExitStack() as stack:
        conns = [
            await stack.enter_async_context(api.stream({"runId": run_id}, auth())) for _ in range(3)
        ]
        for conn in conns:
            assert (await conn.next_event()) is not None
        assert api.runtime.hub.shared
        for i in range(5):
            await leased.emit(AssistantDeltaEvent(text=str(i)))
        await leased.finish("completed", result={"text": "x"})
        for conn in conns:
            assert seqs(await conn.read_to_end(wait=3)) == [2, 3, 4, 5, 6, 7, 8]
    assert reads == [0, 0, 0]


async def test_one_shared_read_hands_each_tenant_only_its_own_runs_events(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alice's and mallory's runs are live at once and read by the hub in the same statement;
    each stream gets exactly its own run's events, all of them, in order."""
    hub = api.runtime.hub
    hub.poll_seconds = 0.2  # the periodic re-read covers every live run in one statement
    batches: list[set[uuid.UUID]] = []
    reader = hub._reader
    own_read = reader.read

    async def recorded(positions: dict[uuid.UUID, int]) -> Any:
        batches.append(set(positions))
        return await own_read(positions)

    monkeypatch.setattr(reader, "read", recorded)
    runs = {user: await start_run(api, user=user) for user in ("alice", "mallory")}
    async with contextlib.AsyncExitStack() as stack:
        conns = {
            (user, i): await stack.enter_async_context(
                api.stream({"runId": runs[user][0]}, auth(user))
            )
            for user in runs
            for i in range(2)
        }
        for conn in conns.values():
            assert (await conn.next_event()) is not None
        for i in range(4):
            for _, leased in runs.values():
                await leased.emit(AssistantDeltaEvent(text=f"d{i}"))
        await asyncio.sleep(0.5)
        for _, leased in runs.values():
            await leased.finish("completed", result={"text": "x"})
        for (user, _), conn in conns.items():
            frames = await conn.read_to_end(wait=3)
            assert seqs(frames) == [2, 3, 4, 5, 6, 7]  # 2: the claim's run.started
            assert {json.loads(f.data or "")["runId"] for f in frames} == {runs[user][0]}
    both = {uuid.UUID(run_id) for run_id, _ in runs.values()}
    assert any(batch == both for batch in batches)


async def test_a_stream_resumes_with_last_event_id_while_the_hub_serves_the_run(
    api: Api,
) -> None:
    """A client that drops and reconnects with `Last-Event-ID` while another stream of the run
    stays live (so the hub has read past it) catches up by itself, then goes live: no gap, no
    duplicate, on either stream."""
    api.runtime.hub.poll_seconds = 30
    run_id, leased = await start_run(api)
    async with api.stream({"runId": run_id}, auth()) as steady:
        assert (await steady.next_event()) is not None
        async with api.stream({"runId": run_id}, auth()) as dropping:
            assert (await dropping.next_event()) is not None
            frame = await dropping.next_event(wait=3)  # the claim's run.started
            assert frame is not None and frame.id == "2"
        for i in range(3):  # while it is away: seqs 3-5, read by the hub for `steady`
            await leased.emit(AssistantDeltaEvent(text=str(i)))
        got = [await steady.next_event(wait=3) for _ in range(4)]
        assert seqs([f for f in got if f]) == [2, 3, 4, 5]
        async with api.stream({"runId": run_id}, {**auth(), "Last-Event-ID": "2"}) as back:
            first = [await back.next_event(wait=3) for _ in range(3)]
            assert seqs([f for f in first if f]) == [3, 4, 5]
            await leased.emit(AssistantDeltaEvent(text="live"))
            await leased.finish("completed", result={"text": "x"})
            assert seqs(await back.read_to_end(wait=3)) == [6, 7]
        assert seqs(await steady.read_to_end(wait=3)) == [6, 7]


async def test_streams_read_for_themselves_when_the_shared_read_fails(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failing shared read hands the streams back to their own reads: nothing is lost."""
    api.runtime.hub.poll_seconds = 30
    reader = api.runtime.hub._reader
    own_read = reader.read
    failures = [RuntimeError("connection lost")]

    async def flaky(positions: dict[uuid.UUID, int]) -> Any:
        if failures:
            raise failures.pop()
        return await own_read(positions)

    run_id, leased = await start_run(api)
    async with api.stream({"runId": run_id}, auth()) as conn:
        assert (await conn.next_event()) is not None
        assert (await conn.next_event()) is not None  # the claim's run.started
        monkeypatch.setattr(reader, "read", flaky)
        await leased.emit(AssistantDeltaEvent(text="s"))
        frame = await conn.next_event(wait=3)
        assert frame is not None and frame.id == "3" and not failures
        await leased.emit(AssistantDeltaEvent(text="a"))
        await leased.finish("completed", result={"text": "x"})
        assert seqs(await conn.read_to_end(wait=3)) == [4, 5]


async def test_the_hub_never_serves_a_stream_of_a_run_its_principal_cannot_see(
    api: Api, alice: Principal, mallory: Principal
) -> None:
    """While the hub serves alice's stream of her run, the same feed asked for by another tenant
    (or by a member who cannot see alice's private session) yields nothing and ends at once:
    the stream's own RLS read comes first, and the hub only hands a run's rows to streams that
    passed it."""
    run_id, leased = await start_run(api)
    async with api.stream({"runId": run_id}, auth()) as conn:
        assert (await conn.next_event()) is not None
        assert (await conn.next_event()) is not None  # the claim's run.started
        await leased.emit(AssistantDeltaEvent(text="s"))
        assert (await conn.next_event(wait=3)) is not None  # the hub is reading this run
        bob = Principal(user_id="bob", tenant_id="acme", role="member")
        for outsider in (mallory, bob):
            got = [e async for e in follow_run(api.runtime, outsider, uuid.UUID(run_id), 0)]
            assert got == []
        await leased.emit(AssistantDeltaEvent(text="secret"))
        await leased.finish("completed", result={"text": "secret"})
        assert seqs(await conn.read_to_end(wait=3)) == [4, 5]
    assert api.runtime.hub.subscriber_count() == 0


async def test_streams_read_for_themselves_when_the_role_obeys_rls(
    database: Database, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database role that cannot bypass RLS cannot read for every tenant: the hub then only
    wakes streams, and each reads its run under its own principal."""
    monkeypatch.setattr(hub_reader, "_BYPASSES_RLS", "SELECT false")
    async with running_api(make_settings(db_url), database) as api:
        api.runtime.hub.poll_seconds = 30  # NOTIFY wake-ups deliver, not the poll
        run_id, leased = await start_run(api)
        async with api.stream({"runId": run_id}, auth()) as conn:
            assert (await conn.next_event()) is not None
            assert api.runtime.hub.listening and not api.runtime.hub.shared
            await leased.emit(AssistantDeltaEvent(text="s"))
            await leased.finish("completed", result={"text": "x"})
            assert seqs(await conn.read_to_end(wait=3)) == [2, 3, 4]
