"""The sessions tools (group `sessions`): `sessions_list`, `sessions_history` and
`sessions_send` (`sessions_send.py`).

They read as the run's tenant (RLS, through `app.sessions.store`): another tenant's sessions do
not exist for them. Within the tenant they reach the run's user's own sessions only, unless the
tenant's policy sets `sessionScope: tenant` (`app.tools.policy`); another user's session is then
"no such session", exactly like a missing one. What the reading tools return is capped: at most 100 sessions or messages, each text cut
to 2,000 characters and a history to 50,000 characters in all (the oldest messages are dropped
first; `truncated` says so).
"""

from __future__ import annotations

import json
from typing import Any

from app.core.transcript import AssistantMessage, ToolResult, UserMessage, load_message
from app.sessions.store import get_session_by_key, list_messages, list_sessions
from app.tools.base import Tool, ToolContext, ToolError
from app.tools.policy_store import sessions_owner_filter
from app.tools.sessions_send import SessionsSend

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
MAX_TEXT_CHARS = 2000
MAX_HISTORY_CHARS = 50_000

_LIMIT = {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}


def cut(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """`text`, or its first `limit` characters and how many were cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"…[truncated {len(text) - limit} chars]"


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def compact(seq: int, payload: dict[str, Any]) -> dict[str, Any]:
    """A transcript entry as the tool returns it (long texts cut)."""
    message = load_message(payload)
    if isinstance(message, UserMessage):
        return {"seq": seq, "role": "user", "text": cut(message.text)}
    if isinstance(message, AssistantMessage):
        entry: dict[str, Any] = {"seq": seq, "role": "assistant", "text": cut(message.text)}
        if message.tool_calls:
            entry["toolCalls"] = [
                {"name": c.name, "args": cut(_as_text(c.args))} for c in message.tool_calls
            ]
        return entry
    assert isinstance(message, ToolResult)
    outcome = (
        {"result": cut(_as_text(message.result))}
        if message.ok
        else {"error": cut(message.error or "")}
    )
    return {"seq": seq, "role": "tool", "name": message.name, "ok": message.ok, **outcome}


class SessionsList(Tool):
    """List the sessions the run may see (its user's, or the tenant's), most recently active
    first."""

    name = "sessions_list"
    description = (
        "List the chat sessions you can reach, most recently active first (your user's; the "
        "whole workspace's if its policy opens them): sessionKey, title, "
        f"messageCount, lastRunAt and whether it is the current session. Optional `limit` "
        f"(default {DEFAULT_LIMIT}, at most {MAX_LIMIT})."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"limit": {**_LIMIT, "description": "Most sessions to return."}},
        "additionalProperties": False,
    }
    idempotent = True
    group = "sessions"

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """`{"sessions": [...], "truncated"}`."""
        limit: int = args.get("limit", DEFAULT_LIMIT)
        async with ctx.db.tenant(ctx.principal) as s:
            owner = await sessions_owner_filter(s, run_id=ctx.run_id, user_id=ctx.principal.user_id)
            rows = await list_sessions(s, limit=limit + 1, user_id=owner)
        return {
            "sessions": [
                {
                    "sessionKey": r.session_key,
                    "title": r.title,
                    "messageCount": r.message_count,
                    "lastRunAt": None if r.last_run_at is None else r.last_run_at.isoformat(),
                    "current": r.id == ctx.session_id,
                }
                for r in rows[:limit]
            ],
            "truncated": len(rows) > limit,
        }


class SessionsHistory(Tool):
    """Read the latest messages of one of the sessions the run may see."""

    name = "sessions_history"
    description = (
        "Read the latest messages of a session (by `sessionKey`, from sessions_list), oldest "
        f"first. Optional `limit` (default {DEFAULT_LIMIT}, at most {MAX_LIMIT}). Long texts are "
        "cut; `truncated` says whether older messages were left out."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "sessionKey": {"type": "string", "minLength": 1, "maxLength": 200},
            "limit": {**_LIMIT, "description": "Most messages to return."},
        },
        "required": ["sessionKey"],
        "additionalProperties": False,
    }
    idempotent = True
    group = "sessions"

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """`{"sessionKey", "messageCount", "messages": [...], "truncated"}`."""
        key: str = args["sessionKey"]
        limit: int = args.get("limit", DEFAULT_LIMIT)
        async with ctx.db.tenant(ctx.principal) as s:
            owner = await sessions_owner_filter(s, run_id=ctx.run_id, user_id=ctx.principal.user_id)
            session = await get_session_by_key(s, key, user_id=owner)
            if session is None:
                raise ToolError(f"no such session: {key}")
            after = max(0, session.message_count - limit)
            rows = await list_messages(s, session.id, after_seq=after, limit=limit)
        messages: list[dict[str, Any]] = []
        used = 0
        for row in reversed(rows):
            entry = compact(row.seq, row.payload)
            size = len(json.dumps(entry, ensure_ascii=False))
            if messages and used + size > MAX_HISTORY_CHARS:
                break
            messages.append(entry)
            used += size
        messages.reverse()
        return {
            "sessionKey": session.session_key,
            "messageCount": session.message_count,
            "messages": messages,
            "truncated": after > 0 or len(messages) < len(rows),
        }


def sessions_tools() -> list[Tool]:
    """One instance of each sessions tool."""
    return [SessionsList(), SessionsHistory(), SessionsSend()]
