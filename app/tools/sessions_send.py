"""`sessions_send`: an agent posts a message into another session of its tenant, and may wait
for that session's answer (docs/multi-agent.md, "Messages between sessions").

Posting is one tenant transaction: a run is queued in the target session's lane (its agent, the
sender's user), whose input carries the message and `from` (the sender's session and run, and the
run that started the exchange), and an `agent_messages` row records it. The row is keyed by the
sender's run and tool call: a call executed again (a worker died, or the call waited and was
woken) finds its row and never posts twice.

With `waitForReply` the run-ended trigger (migration 0006) delivers the target run's outcome to
the sender as a `reply` inbox row. The call takes it (`delivery='tool'`) if it is there; else,
before its timeout (measured from the first execution: the row's `created_at`), it raises
`AwaitingArrival` and the worker parks the sender `waiting` until the reply arrives or the
timeout passes, then executes the call again. A call that timed out returns `timedOut`; the
reply, when it comes, is injected into the sender like any inbox message (or queued after it).

Limits: a session cannot message itself (its lane is busy with the sender: it would wait for
itself); it only reaches the sessions the policy's session scope shows (`policy.py`); and the
messages between two sessions that go back to one originating run are capped (agent setting
`maxExchanges`, else `AGENT_MESSAGE_MAX_EXCHANGES`), so two agents cannot ping-pong forever.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Agent, AgentMessage, AgentSession, Run, RunInboxItem
from app.queue.manager import RunQueue
from app.sessions.store import get_session_by_key
from app.tools.base import AwaitingArrival, Tool, ToolContext, ToolError
from app.tools.policy_store import sessions_owner_filter

MAX_MESSAGE_CHARS = 20_000
DEFAULT_TIMEOUT_SECONDS = 300
MAX_TIMEOUT_SECONDS = 3600
MAX_EXCHANGES_KEY = "maxExchanges"
"""The agent setting (`app.runtime.agent_settings.AgentSettings.max_exchanges`, validated when
stored) read here from the raw `agents.settings`: the tools layer sits below the runtime's."""


class SessionsSend(Tool):
    """Post a message into another session; optionally wait for its reply."""

    name = "sessions_send"
    description = (
        "Send a message to another session (by `sessionKey`, from sessions_list): its agent "
        "answers it in a run of its own. Returns that run's runId at once; with "
        "`waitForReply: true` waits (up to `timeoutSeconds`, default "
        f"{DEFAULT_TIMEOUT_SECONDS}) and returns the reply, or `timedOut: true` (the reply then "
        "arrives later as a message). You cannot message your own session."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "sessionKey": {"type": "string", "minLength": 1, "maxLength": 200},
            "message": {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_CHARS},
            "waitForReply": {"type": "boolean", "description": "Wait for the answer."},
            "timeoutSeconds": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TIMEOUT_SECONDS,
                "description": "How long to wait for the answer (with waitForReply).",
            },
        },
        "required": ["sessionKey", "message"],
        "additionalProperties": False,
    }
    idempotent = True  # by (run, tool call): a re-executed call finds its message
    group = "sessions"
    risk = "medium"

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """`{runId, sessionKey}`; waiting: `{reply, status, runId, sessionKey}` or `{reply: null,
        timedOut: true, ...}`; raises `AwaitingArrival` while the reply is due."""
        timeout = timedelta(seconds=args.get("timeoutSeconds", DEFAULT_TIMEOUT_SECONDS))
        async with ctx.db.tenant(ctx.principal) as s:
            sent = await _sent_by_call(s, ctx)
            if sent is None:
                sent = await _post(s, ctx, args)
            target_key = await s.scalar(
                select(AgentSession.session_key).where(AgentSession.id == sent.target_session_id)
            )
            if sent.target_run_id is None:
                raise ToolError("the message's run no longer exists")
            posted = {"runId": str(sent.target_run_id), "sessionKey": target_key}
            if not sent.wait_for_reply:
                return posted
            reply = await _take_reply(s, ctx, sent.target_run_id)
            if reply is not None:
                # the reply first: it is what the model came for
                return {"reply": reply.text, "status": reply.payload.get("status"), **posted}
            now: datetime | None = await s.scalar(select(func.now()))
            assert now is not None
            deadline = sent.created_at + timeout
            if now >= deadline:
                return {"reply": None, "timedOut": True, **posted}
        raise AwaitingArrival([sent.target_run_id], wake_at=deadline)


async def _sent_by_call(s: AsyncSession, ctx: ToolContext) -> AgentMessage | None:
    """The message this call already posted, if any."""
    found: AgentMessage | None = await s.scalar(
        select(AgentMessage).where(
            AgentMessage.sender_run_id == ctx.run_id,
            AgentMessage.tool_call_id == ctx.tool_call_id,
        )
    )
    return found


async def _post(s: AsyncSession, ctx: ToolContext, args: dict[str, Any]) -> AgentMessage:
    """Queue the target's run and record the message (in the caller's transaction)."""
    key: str = args["sessionKey"]
    owner = await sessions_owner_filter(s, run_id=ctx.run_id, user_id=ctx.principal.user_id)
    target = await get_session_by_key(s, key, user_id=owner)
    if target is None:
        raise ToolError(f"no such session: {key}")
    if target.id == ctx.session_id:
        raise ToolError(
            "cannot send to the current session: its lane is busy with this run, which would "
            "wait for itself; answer here instead"
        )
    sender = await s.get(Run, ctx.run_id)
    sender_key = await s.scalar(
        select(AgentSession.session_key).where(AgentSession.id == ctx.session_id)
    )
    if sender is None or sender_key is None:
        raise ToolError("the sending run no longer exists")
    origin = origin_run_id(sender)
    # One exchange at a time per origin, so that two sessions answering each other at once
    # cannot both pass the cap below.
    await s.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(str(origin), 0))))
    cap = await _max_exchanges(s, sender.agent_id, ctx.settings.agent_message_max_exchanges)
    exchanged = await _exchanges(s, origin, ctx.session_id, target.id)
    if exchanged >= cap:
        raise ToolError(
            f"message cap reached: {exchanged} messages already went between this session and "
            f"{key} in this conversation (maxExchanges {cap}); not sent. Answer without "
            "messaging it again."
        )
    enqueued = await RunQueue(ctx.db).enqueue_in(
        s,
        ctx.principal,
        message=args["message"],
        session_key=target.session_key,
        extra_input={
            "from": {"sessionKey": sender_key, "runId": str(ctx.run_id), "originRunId": str(origin)}
        },
    )
    sent: AgentMessage | None = await s.scalar(
        insert(AgentMessage)
        .values(
            tenant_id=ctx.principal.tenant_id,
            sender_run_id=ctx.run_id,
            sender_session_id=ctx.session_id,
            tool_call_id=ctx.tool_call_id,
            target_session_id=target.id,
            target_run_id=enqueued.run_id,
            origin_run_id=origin,
            message=args["message"],
            wait_for_reply=bool(args.get("waitForReply", False)),
        )
        .returning(AgentMessage)
    )
    assert sent is not None
    return sent


def origin_run_id(sender: Run) -> UUID:
    """The run that started the exchange: the one the sender's own message came from (when a
    `sessions_send` started it), else the sender itself."""
    sent_from = sender.input.get("from")
    if isinstance(sent_from, dict):
        try:
            return UUID(str(sent_from.get("originRunId")))
        except ValueError:
            pass
    return sender.id


async def _max_exchanges(s: AsyncSession, agent_id: UUID, default: int) -> int:
    """The sender's agent's `maxExchanges`, else the server's default."""
    stored = await s.scalar(select(Agent.settings).where(Agent.id == agent_id))
    value = (stored or {}).get(MAX_EXCHANGES_KEY)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return default


async def _exchanges(s: AsyncSession, origin: UUID, one: UUID, other: UUID) -> int:
    """Messages of `origin`'s exchange between sessions `one` and `other`, either way."""
    count = await s.scalar(
        select(func.count())
        .select_from(AgentMessage)
        .where(
            AgentMessage.origin_run_id == origin,
            or_(
                and_(
                    AgentMessage.sender_session_id == one, AgentMessage.target_session_id == other
                ),
                and_(
                    AgentMessage.sender_session_id == other, AgentMessage.target_session_id == one
                ),
            ),
        )
    )
    return int(count or 0)


async def _take_reply(
    s: AsyncSession, ctx: ToolContext, target_run_id: UUID
) -> RunInboxItem | None:
    """The reply of `target_run_id` in the sender's inbox, marked consumed by this call (a reply
    this call took before, in an attempt that died before storing its result, is taken again)."""
    reply: RunInboxItem | None = await s.scalar(
        select(RunInboxItem)
        .where(
            RunInboxItem.run_id == ctx.run_id,
            RunInboxItem.kind == "reply",
            RunInboxItem.source_run_id == target_run_id,
        )
        .with_for_update()
    )
    if reply is None:
        return None
    if reply.delivered_at is None:
        await s.execute(
            update(RunInboxItem)
            .where(RunInboxItem.id == reply.id)
            .values(
                delivered_at=func.now(),
                delivery="tool",
                delivered_to_run_id=ctx.run_id,
                tool_call_id=ctx.tool_call_id,
            )
        )
    return reply
