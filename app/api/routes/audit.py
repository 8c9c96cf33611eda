"""The audit trail for tenant admins: filtered, cursor-paged listing and a JSONL export."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from app.api.audit_schemas import AuditEventInfo, AuditEventsPage
from app.api.deps import AdminPrincipal, DatabaseDep
from app.api.errors import ApiError
from app.api.schemas import ErrorResponse, error_responses
from app.audit.query import AuditFilter, BadCursorError, audit_page, decode_cursor
from app.auth.principal import Principal
from app.db.engine import Database

router = APIRouter(prefix="/api/agent-runtime", tags=["audit"])

EXPORT_PAGE = 500
"""Events per database round trip of the JSONL export (it never holds more in memory)."""
_ACTION = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*\.?$"

_RESPONSES: dict[int | str, dict[str, object]] = {
    200: {
        "description": "A page of events (JSON), or with `format=jsonl` every matching event, one "
        "JSON object per line (`application/x-ndjson`, as an attachment).",
        "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
    },
    400: {
        "model": ErrorResponse,
        "description": "`invalid_cursor`: `cursor` is not one this API returned.",
    },
    403: {
        "model": ErrorResponse,
        "description": "`forbidden_role`: reading the audit trail needs the role admin or owner.",
    },
    **error_responses(401, 422),
}


def _utc(moment: datetime | None) -> datetime | None:
    """Times without an offset are taken as UTC."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


@router.get(
    "/audit", response_model=AuditEventsPage, responses=_RESPONSES, response_model_by_alias=True
)
async def list_audit(
    principal: AdminPrincipal,
    db: DatabaseDep,
    action: Annotated[
        str | None,
        Query(
            max_length=100,
            pattern=_ACTION,
            description="Exact action (`run.created`), or a prefix ending in `.` (`run.`).",
        ),
    ] = None,
    actor: Annotated[
        str | None, Query(min_length=1, max_length=200, description="The acting user's id.")
    ] = None,
    target_type: Annotated[
        str | None, Query(alias="targetType", min_length=1, max_length=100)
    ] = None,
    target_id: Annotated[str | None, Query(alias="targetId", min_length=1, max_length=200)] = None,
    since: Annotated[
        datetime | None, Query(description="ISO 8601; events at or after it (no offset: UTC).")
    ] = None,
    until: Annotated[
        datetime | None, Query(description="ISO 8601; events before it (no offset: UTC).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500, description="Events per page.")] = 100,
    cursor: Annotated[
        str | None, Query(max_length=200, description="`nextCursor` of the previous page.")
    ] = None,
    export_format: Annotated[
        Literal["json", "jsonl"],
        Query(alias="format", description="`jsonl`: export every matching event."),
    ] = "json",
) -> AuditEventsPage | StreamingResponse:
    """The tenant's audit events, newest first (admins and owners only): a page and the cursor of
    the next, or with `format=jsonl` all of them as a download."""
    where = AuditFilter(
        action=action,
        actor_id=actor,
        target_type=target_type,
        target_id=target_id,
        since=_utc(since),
        until=_utc(until),
    )
    if where.since is not None and where.until is not None and where.since >= where.until:
        raise ApiError(422, "until must be later than since", field="until")
    try:
        after_id = None if cursor is None else decode_cursor(cursor)
    except BadCursorError as exc:
        raise ApiError(400, str(exc), code="invalid_cursor", field="cursor") from exc
    if export_format == "jsonl":
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        return StreamingResponse(
            _export(db, principal, where, after_id),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="audit-{stamp}.jsonl"'},
        )
    async with db.tenant(principal) as s:
        page = await audit_page(s, principal.tenant_id, where, limit=limit, after_id=after_id)
        events = [AuditEventInfo.of(e) for e in page.events]
    return AuditEventsPage(events=events, next_cursor=page.next_cursor)


async def _export(
    db: Database, principal: Principal, where: AuditFilter, after_id: int | None
) -> AsyncIterator[bytes]:
    """Every matching event as JSON lines, a page (one short transaction) at a time."""
    while True:
        async with db.tenant(principal) as s:
            page = await audit_page(
                s, principal.tenant_id, where, limit=EXPORT_PAGE, after_id=after_id
            )
            lines = [
                AuditEventInfo.of(e).model_dump_json(by_alias=True) + "\n" for e in page.events
            ]
            last_id = page.events[-1].id if page.events else None
        if lines:
            yield "".join(lines).encode("utf-8")
        if page.next_cursor is None or last_id is None:
            return
        after_id = last_id
