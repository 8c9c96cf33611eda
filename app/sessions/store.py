"""Reading sessions and transcripts for the API.

Every function takes an `AsyncSession` opened with `Database.tenant(principal)`: row-level
security confines the queries to the caller's tenant, so another tenant's session simply does
not exist here.

Sessions are listed most recently active first (`updated_at`, bumped by every new run), with a
keyset cursor on `(updated_at, id)` — stable under inserts, unlike offsets. A search narrows the
listing (a substring of the key or title) and keeps the same order and cursor.

`describe_sessions` adds what a listing shows beside each row: the sub-agent parent it was
spawned from (read from the `subagent_spawns` rows, never from the key's text) and its live run.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

from sqlalchemy import Select, func, or_, select, tuple_, update
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from app.db.models import AgentSession, ContextSnapshot, Run, SessionMessage, SubagentSpawn

LIKE_ESCAPE = "\\"


class InvalidCursorError(ValueError):
    """A `before` value that is neither an ISO timestamp nor a cursor we issued."""


@dataclass(frozen=True, slots=True)
class SessionCursor:
    """A position in the session list: strictly older than `updated_at` (then `id`)."""

    updated_at: datetime
    id: UUID | None = None

    def encode(self) -> str:
        """The opaque string handed to clients as `nextCursor`."""
        raw = f"{self.updated_at.isoformat()}|{self.id or ''}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def parse(cls, value: str) -> SessionCursor:
        """Parse an ISO timestamp (sessions active before it) or a cursor from `encode`."""
        try:
            return cls(updated_at=_aware(datetime.fromisoformat(value)))
        except ValueError:
            pass
        try:
            padded = value + "=" * (-len(value) % 4)
            ts, _, ident = base64.urlsafe_b64decode(padded).decode().partition("|")
            return cls(updated_at=_aware(datetime.fromisoformat(ts)), id=UUID(ident))
        except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
            raise InvalidCursorError("not an ISO timestamp or a cursor from nextCursor") from exc

    @classmethod
    def after(cls, session: AgentSession) -> SessionCursor:
        """The cursor that continues the listing after `session`."""
        return cls(updated_at=session.updated_at, id=session.id)


def _aware(ts: datetime) -> datetime:
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def like_pattern(text: str) -> str:
    """A LIKE pattern matching `text` anywhere, its own `%`, `_` and `\\` taken literally."""
    escaped = (
        text.replace(LIKE_ESCAPE, LIKE_ESCAPE * 2)
        .replace("%", LIKE_ESCAPE + "%")
        .replace("_", LIKE_ESCAPE + "_")
    )
    return f"%{escaped}%"


async def list_sessions(
    session: AsyncSession,
    *,
    limit: int,
    before: SessionCursor | None = None,
    user_id: str | None = None,
    search: str | None = None,
) -> list[AgentSession]:
    """Up to `limit` sessions, most recently active first, older than `before` if given (only
    `user_id`'s when given; only those whose key or title contains `search`, ignoring case,
    when given)."""
    stmt: Select[tuple[AgentSession]] = select(AgentSession)
    if user_id is not None:
        stmt = stmt.where(AgentSession.user_id == user_id)
    if search:
        pattern = like_pattern(search)
        stmt = stmt.where(
            or_(
                AgentSession.session_key.ilike(pattern, escape=LIKE_ESCAPE),
                AgentSession.title.ilike(pattern, escape=LIKE_ESCAPE),
            )
        )
    if before is not None:
        if before.id is None:
            stmt = stmt.where(AgentSession.updated_at < before.updated_at)
        else:
            stmt = stmt.where(
                tuple_(AgentSession.updated_at, AgentSession.id) < (before.updated_at, before.id)
            )
    stmt = stmt.order_by(AgentSession.updated_at.desc(), AgentSession.id.desc()).limit(limit)
    return list(await session.scalars(stmt))


async def get_session_by_key(
    session: AsyncSession, session_key: str, *, user_id: str | None = None
) -> AgentSession | None:
    """The tenant's session with this key, if any (and if `user_id`'s, when given)."""
    stmt = select(AgentSession).where(AgentSession.session_key == session_key)
    if user_id is not None:
        stmt = stmt.where(AgentSession.user_id == user_id)
    result: AgentSession | None = await session.scalar(stmt)
    return result


async def list_messages(
    session: AsyncSession, session_id: UUID, *, after_seq: int = 0, limit: int = 500
) -> list[SessionMessage]:
    """Transcript entries of a session with `seq > after_seq`, in order, at most `limit`."""
    rows = await session.scalars(
        select(SessionMessage)
        .where(SessionMessage.session_id == session_id, SessionMessage.seq > after_seq)
        .order_by(SessionMessage.seq)
        .limit(limit)
    )
    return list(rows)


async def list_compactions(
    session: AsyncSession, session_id: UUID, *, limit: int = 50
) -> list[ContextSnapshot]:
    """A session's compaction snapshots, newest first, at most `limit`."""
    rows = await session.scalars(
        select(ContextSnapshot)
        .where(ContextSnapshot.session_id == session_id)
        .order_by(ContextSnapshot.last_message_seq.desc(), ContextSnapshot.created_at.desc())
        .limit(limit)
    )
    return list(rows)


ACTIVE_STATUSES = ("queued", "running", "awaiting_approval", "waiting")


@dataclass(frozen=True, slots=True)
class SessionListing:
    """A session with what a listing shows beside it."""

    session: AgentSession
    parent_session_key: str | None
    """The session whose run spawned this one as a sub-agent (None for a top-level session)."""
    live_run_id: UUID | None
    """Its active run (as `active_run_id` picks it), None when idle."""


async def describe_sessions(
    session: AsyncSession, rows: list[AgentSession]
) -> list[SessionListing]:
    """`rows` in the same order, each with its sub-agent parent and live run (two queries for
    the whole page)."""
    ids = [r.id for r in rows]
    if not ids:
        return []
    parent = aliased(AgentSession)
    parents = await session.execute(
        select(SubagentSpawn.child_session_id, parent.session_key)
        .join(parent, parent.id == SubagentSpawn.parent_session_id)
        .where(SubagentSpawn.child_session_id.in_(ids))
        .order_by(SubagentSpawn.child_session_id, SubagentSpawn.created_at)
        .ext(distinct_on(SubagentSpawn.child_session_id))
    )
    parent_of: dict[UUID | None, str] = {child: key for child, key in parents}
    live = await session.execute(
        select(Run.session_id, Run.id)
        .where(Run.session_id.in_(ids), Run.status.in_(ACTIVE_STATUSES))
        .order_by(Run.session_id, (Run.status == "queued").asc(), Run.queue_seq)
        .ext(distinct_on(Run.session_id))
    )
    live_of: dict[UUID, UUID] = {sid: rid for sid, rid in live}
    return [SessionListing(r, parent_of.get(r.id), live_of.get(r.id)) for r in rows]


async def active_run_id(session: AsyncSession, session_key: str) -> UUID | None:
    """The session's active run: the running or parked one, else the first queued one (None
    when the session is idle or unknown)."""
    return await session.scalar(
        select(Run.id)
        .join(AgentSession, AgentSession.id == Run.session_id)
        .where(AgentSession.session_key == session_key, Run.status.in_(ACTIVE_STATUSES))
        .order_by((Run.status == "queued").asc(), Run.queue_seq)
        .limit(1)
    )


async def set_visibility(
    session: AsyncSession, agent_session: AgentSession, visibility: str
) -> AgentSession:
    """Share (`tenant`) or unshare (`private`) a session; returns it refreshed."""
    await session.execute(
        update(AgentSession)
        .where(AgentSession.id == agent_session.id)
        .values(visibility=visibility, updated_at=func.now())
    )
    await session.refresh(agent_session)
    return agent_session
