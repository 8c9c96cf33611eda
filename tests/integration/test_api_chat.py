"""The AI SDK chat routes in-process: errors before the stream (JSON shape), the exact framing and
headers of the UI message stream, the run's events as chunks, and resume (204 when idle)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.core.events import AssistantDeltaEvent, AssistantMessageEvent
from app.db.engine import Database
from app.queue.lease import LeasedRun
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api

pytestmark = pytest.mark.timeout(30)

CHAT = "/api/agent-runtime/chat"


@pytest.fixture
async def api(database: Database, db_url: str) -> AsyncIterator[Api]:
    async with running_api(make_settings(db_url, sse_keepalive_seconds=5), database) as api:
        yield api


def body(text: str = "hi", chat_id: str = "chat-1", **extra: Any) -> dict[str, Any]:
    return {
        "id": chat_id,
        "messages": [
            {"id": "m0", "role": "user", "parts": [{"type": "text", "text": "earlier"}]},
            {"id": "a0", "role": "assistant", "parts": [{"type": "text", "text": "answer"}]},
            {
                "id": "m1",
                "role": "user",
                "parts": [{"type": "step-start"}, {"type": "text", "text": text}],
            },
        ],
        "trigger": "submit-message",
        "messageId": None,
        **extra,
    }


def chunks_of(raw: str) -> list[Any]:
    """The `data` of each frame, checking the framing is exactly `data: …\\n\\n`."""
    frames = [f for f in raw.split("\n\n") if f and not f.startswith(":")]
    assert raw.endswith("data: [DONE]\n\n"), raw[-200:]
    out = []
    for frame in frames:
        assert frame.startswith("data: ") and "\n" not in frame, frame
        data = frame.removeprefix("data: ")
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


async def work(api: Api, run_id: str) -> str:
    """A fake worker: claim the run, stream an answer, complete it; the run's message."""
    claimed = await api.runtime.queue.claim_next("w", 30)
    assert claimed is not None and str(claimed.id) == run_id
    leased = LeasedRun(api.runtime.db, claimed, "w")  # the claim stored run.started
    await leased.emit(AssistantDeltaEvent(text="Hel"))
    await leased.emit(AssistantDeltaEvent(text="lo"))
    await leased.emit(AssistantMessageEvent(text="Hello", tool_calls=[]))
    await leased.finish("completed", result={"text": "Hello"})
    return str(claimed.input["message"])


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"id": "c", "messages": []}, "messages"),
        (
            {
                "id": "c",
                "messages": [
                    {"id": "a", "role": "assistant", "parts": [{"type": "text", "text": "x"}]}
                ],
            },
            "messages",
        ),
        (
            {"id": "c", "messages": [{"id": "u", "role": "user", "parts": [{"type": "file"}]}]},
            "messages",
        ),
        (
            {
                "id": "c",
                "messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": " "}]}],
            },
            "messages",
        ),
        ({"id": "no spaces", "messages": []}, "id"),
        ({"messages": []}, "id"),
    ],
)
async def test_bodies_without_a_runnable_user_message_are_422(
    api: Api, payload: dict[str, Any], field: str
) -> None:
    r = await api.client.post(CHAT, json=payload, headers=auth())
    assert r.status_code == 422, r.text
    assert error_of(r)["field"] == field


async def test_auth_and_unknown_agent_errors_are_json(api: Api) -> None:
    r = await api.client.post(CHAT, json=body())
    assert r.status_code == 401 and error_of(r)["code"] == "unauthorized"
    r = await api.client.post(CHAT, json=body(agentId=str(uuid.uuid4())), headers=auth())
    assert r.status_code == 404 and error_of(r)["field"] == "agentId"
    r = await api.client.get(f"{CHAT}/chat-1/stream")
    assert r.status_code == 401 and error_of(r)["code"] == "unauthorized"
    r = await api.client.get(f"{CHAT}/bad%20id/stream", headers=auth())
    assert r.status_code == 422 and error_of(r)["field"] == "id"


async def test_a_chat_turn_streams_the_run_as_ui_message_chunks(api: Api) -> None:
    conn = api.stream_post(CHAT, body("hello there"), auth())
    async with conn:
        assert conn.status == 200
        assert conn.headers["x-vercel-ai-ui-message-stream"] == "v1"
        assert conn.headers["content-type"].startswith("text/event-stream")
        first = await conn.next_frame()
        assert first is not None and first.data is not None
        start = json.loads(first.data)
        assert start["type"] == "start"
        run_id = start["messageId"]
        assert await work(api, run_id) == "hello there"  # the last user message's text
        rest = await conn.read_to_end()
    raw = conn.body.decode()
    chunks = chunks_of(raw)
    assert chunks[0] == start and chunks[-1] == "[DONE]"
    content = [c for c in chunks[1:-1] if not c["type"].startswith("data-")]
    assert content == [
        {"type": "start-step"},
        {"type": "text-start", "id": "text-3"},
        {"type": "text-delta", "id": "text-3", "delta": "Hel"},
        {"type": "text-delta", "id": "text-3", "delta": "lo"},
        {"type": "text-end", "id": "text-3"},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "stop"},
    ]
    assert len(rest) == len(chunks) - 1
    status = (
        await api.client.get("/api/agent-runtime/status", params={"runId": run_id}, headers=auth())
    ).json()
    assert status["sessionKey"] == "chat-1" and status["status"] == "completed"


async def test_resume_is_204_when_idle_and_replays_the_active_run(api: Api) -> None:
    r = await api.client.get(f"{CHAT}/chat-9/stream", headers=auth())
    assert r.status_code == 204 and r.content == b""
    run = await api.post_run("queued one", sessionKey="chat-9")
    # another tenant does not see it
    r = await api.client.get(f"{CHAT}/chat-9/stream", headers=auth("mallory"))
    assert r.status_code == 204
    conn = api.stream_get(f"{CHAT}/chat-9/stream", auth())
    async with conn:
        assert conn.status == 200 and conn.headers["x-vercel-ai-ui-message-stream"] == "v1"
        first = await conn.next_frame()
        assert first is not None and json.loads(first.data or "") == {
            "type": "start",
            "messageId": run["runId"],
        }
        await work(api, run["runId"])
        await conn.read_to_end()
    chunks = chunks_of(conn.body.decode())
    assert {"type": "finish", "finishReason": "stop"} in chunks
    r = await api.client.get(f"{CHAT}/chat-9/stream", headers=auth())
    assert r.status_code == 204


async def test_a_retried_chat_post_with_the_same_idempotency_key_streams_the_same_run(
    api: Api,
) -> None:
    keyed = {**auth(), "Idempotency-Key": "chat-retry-1"}
    first = api.stream_post(CHAT, body("once"), keyed)
    async with first:
        assert first.status == 200 and "idempotent-replayed" not in first.headers
        frame = await first.next_frame()
        assert frame is not None and frame.data is not None
        run_id = json.loads(frame.data)["messageId"]
    again = api.stream_post(CHAT, body("once"), keyed)
    async with again:
        assert again.status == 200 and again.headers["idempotent-replayed"] == "true"
        frame = await again.next_frame()
        assert frame is not None and frame.data is not None
        assert json.loads(frame.data)["messageId"] == run_id
    # one run was queued: the worker finds it, and nothing after it
    assert await work(api, run_id) == "once"
    assert await api.runtime.queue.claim_next("w", 30) is None
    r = await api.client.post(CHAT, json=body("something else"), headers=keyed)
    assert r.status_code == 422 and error_of(r)["code"] == "idempotency_key_reused", r.text
