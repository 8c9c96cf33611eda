"""Sessions API: listing with cursor pagination, transcripts as JSON and JSONL, isolation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime

import pytest

from app.core.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage
from app.db.engine import Database
from app.queue.lease import LeasedRun
from app.runtime.transcript_store import append_messages
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api

pytestmark = pytest.mark.timeout(30)

SESSIONS = "/api/agent-runtime/sessions"


@pytest.fixture
async def api(database: Database, db_url: str) -> AsyncIterator[Api]:
    async with running_api(make_settings(db_url), database) as api:
        yield api


async def converse(api: Api, session_key: str, text: str, user: str = "alice") -> str:
    """Post `text` and store a transcript for it as a worker would; returns the run id."""
    run = await api.post_run(text, user=user, sessionKey=session_key)
    claimed = await api.runtime.queue.claim_next("w", 30)
    assert claimed is not None and str(claimed.id) == run["runId"]
    leased = LeasedRun(api.runtime.db, claimed, "w")
    call = ToolCall(id="c1", name="read_file", args={"path": "a.txt"})
    await append_messages(
        leased,
        [
            UserMessage(text=text),
            AssistantMessage(text="let me look", tool_calls=[call]),
            ToolResult(tool_call_id="c1", name="read_file", ok=True, result={"content": "x"}),
            AssistantMessage(text=f"answer to {text}"),
        ],
    )
    await leased.finish("completed", result={"text": f"answer to {text}"})
    return str(run["runId"])


async def test_list_sessions_newest_first_with_fields(api: Api) -> None:
    await converse(api, "older", "first")
    await api.post_run("second", sessionKey="newer")
    r = await api.client.get(SESSIONS, headers=auth())
    assert r.status_code == 200, r.text
    body = r.json()
    assert [s["sessionKey"] for s in body["sessions"]] == ["newer", "older"]
    assert body["nextCursor"] is None
    older = body["sessions"][1]
    assert older["messageCount"] == 4 and older["title"] is None
    assert set(older) == {
        "sessionKey",
        "agentId",
        "title",
        "messageCount",
        "createdAt",
        "updatedAt",
        "lastRunAt",
        "tokenCount",
        "contextTokens",
        "compactions",
        "parentSessionKey",
        "liveRunId",
        "userId",
        "visibility",
    }
    assert older["userId"] == "alice" and older["visibility"] == "private"
    assert older["lastRunAt"] is not None
    assert older["tokenCount"] > 0 and older["compactions"] == 0


async def test_sessions_paginate_with_cursor_and_timestamp(api: Api) -> None:
    keys = [f"k{i}" for i in range(5)]
    for key in keys:
        await api.post_run("hi", sessionKey=key)
    seen: list[dict[str, str]] = []
    cursor = None
    pages = 0
    while True:
        params = {"limit": "2"} | ({"before": cursor} if cursor else {})
        body = (await api.client.get(SESSIONS, params=params, headers=auth())).json()
        seen += body["sessions"]
        pages += 1
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert pages == 3
    assert [s["sessionKey"] for s in seen] == keys[::-1]
    stamps = [datetime.fromisoformat(s["updatedAt"]) for s in seen]
    assert stamps == sorted(stamps, reverse=True)

    r = await api.client.get(SESSIONS, params={"before": seen[2]["updatedAt"]}, headers=auth())
    assert [s["sessionKey"] for s in r.json()["sessions"]] == ["k1", "k0"]
    r = await api.client.get(SESSIONS, params={"before": "2000-01-01T00:00:00"}, headers=auth())
    assert r.json() == {"sessions": [], "nextCursor": None}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "201"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"before": "yesterday"}, "before"),
        ({"before": "bm90LWEtY3Vyc29y"}, "before"),
        ({"before": "\u0000"}, "before"),
    ],
)
async def test_bad_list_parameters_are_422(api: Api, params: dict[str, str], field: str) -> None:
    r = await api.client.get(SESSIONS, params=params, headers=auth())
    assert r.status_code == 422, r.text
    assert error_of(r)["field"] == field


async def test_messages_as_json_pages(api: Api) -> None:
    run_id = await converse(api, "chat", "hello")
    r = await api.client.get(f"{SESSIONS}/chat/messages", headers=auth())
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["sessionKey"] == "chat" and body["nextAfterSeq"] is None
    messages = body["messages"]
    assert [(m["seq"], m["role"], m["payload"]["kind"]) for m in messages] == [
        (1, "user", "user"),
        (2, "assistant", "assistant"),
        (3, "tool", "tool_result"),
        (4, "assistant", "assistant"),
    ]
    assert all(m["runId"] == run_id and m["createdAt"] for m in messages)
    assert messages[1]["payload"]["toolCalls"] == [
        {"id": "c1", "name": "read_file", "args": {"path": "a.txt"}}
    ]
    assert messages[2]["payload"]["toolCallId"] == "c1"

    r = await api.client.get(
        f"{SESSIONS}/chat/messages", params={"afterSeq": "1", "limit": "2"}, headers=auth()
    )
    page = r.json()
    assert [m["seq"] for m in page["messages"]] == [2, 3] and page["nextAfterSeq"] == 3
    r = await api.client.get(f"{SESSIONS}/chat/messages", params={"afterSeq": "3"}, headers=auth())
    assert [m["seq"] for m in r.json()["messages"]] == [4] and r.json()["nextAfterSeq"] is None


async def test_messages_as_jsonl(api: Api) -> None:
    await converse(api, "chat", "hello")
    await converse(api, "chat", "again")
    as_json = (await api.client.get(f"{SESSIONS}/chat/messages", headers=auth())).json()
    r = await api.client.get(
        f"{SESSIONS}/chat/messages", params={"format": "jsonl"}, headers=auth()
    )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/x-ndjson")
    lines = r.text.splitlines()
    assert r.text.endswith("\n") and len(lines) == 8
    assert [json.loads(line) for line in lines] == as_json["messages"]

    r = await api.client.get(
        f"{SESSIONS}/chat/messages",
        params={"format": "jsonl", "afterSeq": "2", "limit": "3"},
        headers=auth(),
    )
    assert [json.loads(line)["seq"] for line in r.text.splitlines()] == [3, 4, 5]


async def test_empty_transcript_and_bad_message_parameters(api: Api) -> None:
    await api.post_run("queued only", sessionKey="fresh")
    r = await api.client.get(f"{SESSIONS}/fresh/messages", headers=auth())
    assert r.json() == {"sessionKey": "fresh", "messages": [], "nextAfterSeq": None}
    r = await api.client.get(
        f"{SESSIONS}/fresh/messages", params={"format": "jsonl"}, headers=auth()
    )
    assert r.status_code == 200 and r.text == ""
    for params, field in [
        ({"format": "xml"}, "format"),
        ({"afterSeq": "-1"}, "afterSeq"),
        ({"afterSeq": "2147483648"}, "afterSeq"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
    ]:
        r = await api.client.get(f"{SESSIONS}/fresh/messages", params=params, headers=auth())
        assert r.status_code == 422 and error_of(r)["field"] == field, (params, r.text)
    for bad_key in ["has%20space", "nul%00", "k" * 201]:
        r = await api.client.get(f"{SESSIONS}/{bad_key}/messages", headers=auth())
        assert r.status_code == 422 and error_of(r)["field"] == "sessionKey", (bad_key, r.text)


async def test_unknown_session_is_404(api: Api) -> None:
    for fmt in ("json", "jsonl"):
        r = await api.client.get(
            f"{SESSIONS}/nope/messages", params={"format": fmt}, headers=auth()
        )
        assert r.status_code == 404
        assert error_of(r)["code"] == "not_found" and error_of(r)["field"] == "sessionKey"


async def test_same_key_in_two_tenants_is_two_sessions(api: Api) -> None:
    await converse(api, "shared", "alice's secret")
    await converse(api, "shared", "mallory's note", user="mallory")

    for user, mine, theirs in [
        ("alice", "alice's secret", "mallory's note"),
        ("mallory", "mallory's note", "alice's secret"),
    ]:
        listing = (await api.client.get(SESSIONS, headers=auth(user))).json()["sessions"]
        assert [s["sessionKey"] for s in listing] == ["shared"]
        assert listing[0]["messageCount"] == 4
        for fmt in ("json", "jsonl"):
            r = await api.client.get(
                f"{SESSIONS}/shared/messages", params={"format": fmt}, headers=auth(user)
            )
            assert mine in r.text and theirs not in r.text


async def test_other_tenants_session_is_404(api: Api) -> None:
    await converse(api, "private", "secret")
    for fmt in ("json", "jsonl"):
        r = await api.client.get(
            f"{SESSIONS}/private/messages", params={"format": fmt}, headers=auth("mallory")
        )
        assert r.status_code == 404 and "secret" not in r.text
    assert (await api.client.get(SESSIONS, headers=auth("mallory"))).json()["sessions"] == []
