"""Helpers for the `ifBusy` tests: an API with two real workers (agent loop, offline model, a
slow tool), posting, waiting for a session to go idle, and the invariants every race must keep."""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import httpx
from sqlalchemy import select

from app.auth.principal import Principal
from app.db.engine import Database
from app.db.models import AgentSession, Run, RunEvent, SessionMessage
from tests.integration.api_support import Api, auth, make_settings, running_api
from tests.integration.policy_support import (
    SleepTool,
    catalog_with,
    running_worker,
    worker_settings,
)

TOKEN = re.compile(r"\[m\d\d\]")
LIVE = {"queued", "running", "awaiting_approval", "waiting"}


def slow(ms: int) -> str:
    """A `/tool` line calling the slow tool."""
    return f'/tool slow {{"ms": {ms}}}'


@asynccontextmanager
async def busy_stack(
    db_url: str, database: Database, *, collect_window: float = 0.4, workers: int = 2
) -> AsyncIterator[Api]:
    """The API (in process) and `workers` real workers running the agent loop."""
    catalog = catalog_with(SleepTool("slow"))
    settings = make_settings(db_url, collect_window_seconds=collect_window)
    async with running_api(settings, database) as api:
        ws = worker_settings(db_url, collect_window_seconds=collect_window)
        async with running_worker(database, ws, "w1", catalog):
            if workers > 1:
                async with running_worker(database, ws, "w2", catalog):
                    yield api
            else:
                yield api


async def post(
    api: Api,
    session: str,
    message: str,
    if_busy: str | None = None,
    *,
    delay: float = 0.0,
    key: str | None = None,
) -> httpx.Response:
    """POST the message to the session (after `delay` seconds)."""
    if delay:
        await asyncio.sleep(delay)
    body: dict[str, Any] = {"message": message, "sessionKey": session}
    if if_busy is not None:
        body["ifBusy"] = if_busy
    headers = auth() if key is None else {**auth(), "Idempotency-Key": key}
    return await api.client.post("/api/agent-runtime", json=body, headers=headers)


async def post_all(
    api: Api, session: str, messages: list[str], if_busy: str, *, spread: float = 0.0
) -> list[httpx.Response]:
    """Post every message at once (`spread`: each after a random delay up to that)."""
    return list(
        await asyncio.gather(
            *(
                post(api, session, m, if_busy, delay=random.uniform(0, spread) if spread else 0)
                for m in messages
            )
        )
    )


@dataclass
class LaneRun:
    id: UUID
    status: str
    input: dict[str, Any]
    started_at: datetime | None
    queue_seq: int


@dataclass
class SessionView:
    runs: list[LaneRun]
    transcript: list[dict[str, Any]]
    events: dict[UUID, list[tuple[str, dict[str, Any]]]]


async def view(database: Database, who: Principal, session_key: str) -> SessionView:
    async with database.tenant(who) as s:
        session_id = await s.scalar(
            select(AgentSession.id).where(AgentSession.session_key == session_key)
        )
        runs = [
            LaneRun(r.id, r.status, r.input, r.started_at, r.queue_seq)
            for r in await s.scalars(
                select(Run).where(Run.session_id == session_id).order_by(Run.queue_seq)
            )
        ]
        transcript = list(
            await s.scalars(
                select(SessionMessage.payload)
                .where(SessionMessage.session_id == session_id)
                .order_by(SessionMessage.seq)
            )
        )
        events: dict[UUID, list[tuple[str, dict[str, Any]]]] = {}
        for row in await s.scalars(
            select(RunEvent)
            .where(RunEvent.run_id.in_([r.id for r in runs]))
            .order_by(RunEvent.run_id, RunEvent.seq)
        ):
            events.setdefault(row.run_id, []).append((row.type, row.data))
    return SessionView(runs, transcript, events)


async def wait_idle(
    database: Database,
    who: Principal,
    session_key: str,
    timeout: float = 30,  # noqa: ASYNC109
) -> SessionView:
    """The session once none of its runs is live (and nothing changed for a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        seen = await view(database, who, session_key)
        if not any(r.status in LIVE for r in seen.runs):
            await asyncio.sleep(0.3)  # a follow-up queued by a run's end shows up as live
            again = await view(database, who, session_key)
            if not any(r.status in LIVE for r in again.runs):
                return again
        assert time.monotonic() < deadline, [(r.id, r.status) for r in seen.runs]
        await asyncio.sleep(0.1)


def user_texts(transcript: list[dict[str, Any]]) -> list[str]:
    return [m["text"] for m in transcript if m["kind"] == "user"]


def check_invariants(seen: SessionView, tokens: list[str]) -> None:
    """Nothing lost, nothing applied twice, lane order kept, every call has one result.

    Each message is in the transcript at most once and in at most one run's input; one that is
    not in the transcript is in the input of a cancelled run (interrupted before reading it)."""
    in_transcript = Counter(t for text in user_texts(seen.transcript) for t in TOKEN.findall(text))
    in_inputs = Counter(
        t for r in seen.runs for t in TOKEN.findall(str(r.input.get("message", "")))
    )
    cancelled = {  # a message may stay in the input of a run cancelled before it read it
        t
        for r in seen.runs
        if r.status == "cancelled"
        for t in TOKEN.findall(str(r.input.get("message", "")))
    }
    for token in tokens:
        assert in_transcript[token] <= 1, (token, "applied twice", user_texts(seen.transcript))
        assert in_inputs[token] <= 1, (token, "in two runs", [r.input for r in seen.runs])
        delivered = in_transcript[token] == 1
        assert delivered or token in cancelled, (token, "lost", user_texts(seen.transcript))
    assert set(in_transcript) <= set(tokens)
    started = [r for r in seen.runs if r.started_at is not None]
    assert [r.id for r in sorted(started, key=lambda r: r.started_at or 0)] == [
        r.id for r in started
    ], "runs started out of lane order"
    calls = Counter(
        c["id"] for m in seen.transcript if m["kind"] == "assistant" for c in m["toolCalls"]
    )
    results = Counter(m["toolCallId"] for m in seen.transcript if m["kind"] == "tool_result")
    assert calls == results, (calls, results)
    assert all(r.status in ("completed", "cancelled") for r in seen.runs), [
        (r.status, r.input) for r in seen.runs
    ]


def types_of(seen: SessionView, run_id: UUID | str) -> list[str]:
    return [t for t, _ in seen.events.get(UUID(str(run_id)), [])]
