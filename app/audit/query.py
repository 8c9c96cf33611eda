"""Reading the audit trail: filtered, newest first, in id-keyset pages (the admin API's store).

Reads run in the caller's tenant transaction, so RLS limits them to the tenant's events and to
admins (`audit_read`); the explicit tenant condition lets the `(tenant_id, id DESC)` indexes
serve the keyset.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import AuditEvent

MAX_EVENT_ID = 2**63 - 1  # bigint


class BadCursorError(ValueError):
    """A `cursor` this store did not hand out (tampered with, truncated, from elsewhere)."""


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which events to read; None matches anything.

    `action` is matched exactly, or as a prefix when it ends with `.` (`run.` is every run
    action); `since` is inclusive, `until` exclusive.
    """

    action: str | None = None
    actor_id: str | None = None
    target_type: str | None = None
    target_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True, slots=True)
class AuditPage:
    """One page of events, newest first, and the cursor of the next (None: this was the last)."""

    events: list[AuditEvent]
    next_cursor: str | None


_CURSOR_PREFIX = "a1."


def encode_cursor(event_id: int) -> str:
    """The opaque cursor of the page after the event `event_id` (older events)."""
    raw = f"{_CURSOR_PREFIX}{event_id}".encode("ascii")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The event id a cursor continues after; BadCursorError when it is not one of ours."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        raw = base64.urlsafe_b64decode(padded.encode("ascii")).decode("ascii")
    except (UnicodeError, binascii.Error, ValueError) as exc:
        raise BadCursorError("cursor is not one this API returned") from exc
    digits = raw.removeprefix(_CURSOR_PREFIX)
    if raw == digits or not digits.isascii() or not digits.isdigit() or len(digits) > 19:
        raise BadCursorError("cursor is not one this API returned")
    event_id = int(digits)
    if not 0 < event_id <= MAX_EVENT_ID:
        raise BadCursorError("cursor is not one this API returned")
    return event_id


def _filtered(tenant_id: str, where: AuditFilter) -> Select[AuditEvent]:
    stmt = select(AuditEvent).where(AuditEvent.tenant_id == tenant_id)
    if where.action is not None:
        if where.action.endswith("."):
            stmt = stmt.where(AuditEvent.action.startswith(where.action, autoescape=True))
        else:
            stmt = stmt.where(AuditEvent.action == where.action)
    if where.actor_id is not None:
        stmt = stmt.where(AuditEvent.actor_id == where.actor_id)
    if where.target_type is not None:
        stmt = stmt.where(AuditEvent.target_type == where.target_type)
    if where.target_id is not None:
        stmt = stmt.where(AuditEvent.target_id == where.target_id)
    if where.since is not None:
        stmt = stmt.where(AuditEvent.created_at >= where.since)
    if where.until is not None:
        stmt = stmt.where(AuditEvent.created_at < where.until)
    return stmt


async def audit_page(
    session: AsyncSession,
    tenant_id: str,
    where: AuditFilter,
    *,
    limit: int,
    after_id: int | None = None,
) -> AuditPage:
    """Up to `limit` matching events of the tenant, newest first, older than `after_id` (the
    previous page's last event) if given."""
    stmt = _filtered(tenant_id, where)
    if after_id is not None:
        stmt = stmt.where(AuditEvent.id < after_id)
    rows = list(await session.scalars(stmt.order_by(AuditEvent.id.desc()).limit(limit + 1)))
    more = len(rows) > limit
    events = rows[:limit]
    return AuditPage(events=events, next_cursor=encode_cursor(events[-1].id) if more else None)
