"""Sessions: the session list (with search), one session, sharing it, and each session's
transcript (JSON or JSONL). What a caller sees is what RLS shows their role (docs/roles.md)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Literal, cast
from uuid import UUID

from fastapi import APIRouter, Path, Query
from fastapi.responses import StreamingResponse

from app.api.deps import CurrentPrincipal, DatabaseDep, JsonBody
from app.api.errors import ApiError
from app.api.schemas import (
    MAX_SEQ,
    SESSION_KEY_PATTERN,
    CompactionInfo,
    CompactionList,
    MessageInfo,
    MessagePage,
    SessionInfo,
    SessionPage,
    SessionUpdate,
    SessionVisibility,
    error_responses,
)
from app.auth.principal import Principal
from app.db.engine import Database
from app.db.models import SessionMessage
from app.sessions.store import (
    InvalidCursorError,
    SessionCursor,
    SessionListing,
    describe_sessions,
    get_session_by_key,
    list_compactions,
    list_messages,
    list_sessions,
    set_visibility,
)

router = APIRouter(prefix="/api/agent-runtime/sessions", tags=["sessions"])

JSONL_BATCH = 500
DEFAULT_MESSAGE_LIMIT = 200
MAX_SEARCH_CHARS = 200

SessionKeyPath = Annotated[
    str,
    Path(
        alias="sessionKey",
        min_length=1,
        max_length=200,
        pattern=SESSION_KEY_PATTERN,
        description="The session's key.",
    ),
]


def _session_info(listing: SessionListing) -> SessionInfo:
    r = listing.session
    return SessionInfo(
        session_key=r.session_key,
        agent_id=r.agent_id,
        title=r.title,
        message_count=r.message_count,
        created_at=r.created_at,
        updated_at=r.updated_at,
        last_run_at=r.last_run_at,
        token_count=r.token_count,
        context_tokens=r.context_tokens,
        compactions=r.compactions,
        parent_session_key=listing.parent_session_key,
        live_run_id=listing.live_run_id,
        user_id=r.user_id,
        visibility=cast(SessionVisibility, r.visibility),
    )


@router.get("", response_model=SessionPage, responses=error_responses(401, 422))
async def get_sessions(
    principal: CurrentPrincipal,
    db: DatabaseDep,
    limit: Annotated[int, Query(ge=1, le=200, description="Page size.")] = 50,
    before: Annotated[
        str | None,
        Query(
            max_length=200,
            description="`nextCursor` of the previous page, or an ISO timestamp: only sessions "
            "last active before it.",
        ),
    ] = None,
    q: Annotated[
        str | None,
        Query(
            max_length=MAX_SEARCH_CHARS,
            description="Only sessions whose key or title contains this text, ignoring case "
            "(`%` and `_` match themselves). Pages on with `before` like the full list.",
        ),
    ] = None,
) -> SessionPage:
    """The sessions the caller may see, most recently active first (keyset-paginated, optionally
    searched): a member's own and the shared ones; all of the tenant's for owners and admins."""
    cursor = None
    if before is not None:
        try:
            cursor = SessionCursor.parse(before)
        except InvalidCursorError as exc:
            raise ApiError(422, f"before: {exc}", field="before") from exc
    search = (q or "").strip()
    if any(ord(c) < 32 for c in search):
        raise ApiError(422, "q: control characters are not allowed", field="q")
    async with db.tenant(principal) as s:
        rows = await list_sessions(s, limit=limit + 1, before=cursor, search=search or None)
        page, more = rows[:limit], len(rows) > limit
        listings = await describe_sessions(s, page)
    return SessionPage(
        sessions=[_session_info(listing) for listing in listings],
        next_cursor=SessionCursor.after(page[-1]).encode() if more else None,
    )


@router.get("/{sessionKey}", response_model=SessionInfo, responses=error_responses(401, 404, 422))
async def get_session(
    principal: CurrentPrincipal, db: DatabaseDep, session_key: SessionKeyPath
) -> SessionInfo:
    """One session of the tenant, with its live run (if any) and sub-agent parent."""
    async with db.tenant(principal) as s:
        found = await get_session_by_key(s, session_key)
        if found is None:
            raise ApiError(404, f"session {session_key!r} not found", field="sessionKey")
        (listing,) = await describe_sessions(s, [found])
    return _session_info(listing)


@router.patch(
    "/{sessionKey}",
    response_model=SessionInfo,
    responses=error_responses(400, 401, 403, 404, 415, 422),
)
async def patch_session(
    principal: CurrentPrincipal,
    db: DatabaseDep,
    _json: JsonBody,
    session_key: SessionKeyPath,
    body: SessionUpdate,
) -> SessionInfo:
    """Share a session with the tenant (`{"visibility": "tenant"}`: every member may read it,
    only its user and admins post to it) or make it private again. Its user or a tenant
    owner/admin only (403 `read_only_session` for another member of a shared session)."""
    async with db.tenant(principal) as s:
        found = await get_session_by_key(s, session_key)
        if found is None:
            raise ApiError(404, f"session {session_key!r} not found", field="sessionKey")
        if not principal.is_admin and found.user_id != principal.user_id:
            raise ApiError(
                403,
                f"only the session's user or a tenant admin may change session {session_key!r}",
                code="read_only_session",
                field="sessionKey",
            )
        if found.visibility != body.visibility:
            found = await set_visibility(s, found, body.visibility)
        (listing,) = await describe_sessions(s, [found])
    return _session_info(listing)


def _message_info(m: SessionMessage) -> MessageInfo:
    return MessageInfo(
        seq=m.seq,
        run_id=m.run_id,
        role=m.role,
        created_at=m.created_at,
        token_count=m.token_count,
        payload=m.payload,
    )


@router.get(
    "/{sessionKey}/compactions",
    response_model=CompactionList,
    responses=error_responses(401, 404, 422),
)
async def get_compactions(
    principal: CurrentPrincipal,
    db: DatabaseDep,
    session_key: SessionKeyPath,
    limit: Annotated[int, Query(ge=1, le=200, description="At most this many.")] = 50,
) -> CompactionList:
    """A session's context compactions, newest first (the summaries models see instead of the
    older messages; the transcript keeps every message)."""
    async with db.tenant(principal) as s:
        found = await get_session_by_key(s, session_key)
        if found is None:
            raise ApiError(404, f"session {session_key!r} not found", field="sessionKey")
        rows = await list_compactions(s, found.id, limit=limit)
    return CompactionList(
        session_key=session_key,
        compactions=[
            CompactionInfo(
                id=r.id,
                run_id=r.run_id,
                summary=r.summary,
                first_seq=r.first_message_seq,
                last_seq=r.last_message_seq,
                messages_covered=r.messages_covered,
                tokens_before=r.tokens_before,
                tokens_after=r.tokens_after,
                summary_tokens=r.summary_tokens,
                model=r.model,
                created_at=r.created_at,
            )
            for r in rows
        ],
    )


@router.get(
    "/{sessionKey}/messages",
    response_model=MessagePage,
    responses={
        200: {
            "content": {
                "application/x-ndjson": {
                    "schema": {"$ref": "#/components/schemas/MessageInfo"},
                }
            },
            "description": "JSON page, or with `format=jsonl` one message object per line.",
        },
        **error_responses(401, 404, 422),
    },
)
async def get_messages(
    principal: CurrentPrincipal,
    db: DatabaseDep,
    session_key: SessionKeyPath,
    fmt: Annotated[
        Literal["json", "jsonl"],
        Query(alias="format", description="`jsonl`: stream NDJSON, one message a line."),
    ] = "json",
    after_seq: Annotated[
        int,
        Query(alias="afterSeq", ge=0, le=MAX_SEQ, description="Only messages with a greater seq."),
    ] = 0,
    limit: Annotated[
        int | None,
        Query(ge=1, le=1000, description="At most this many (JSON default 200; JSONL: all)."),
    ] = None,
) -> MessagePage | StreamingResponse:
    """A session's transcript in order, as a JSON page or streamed JSONL."""
    page_size = limit or DEFAULT_MESSAGE_LIMIT
    async with db.tenant(principal) as s:
        found = await get_session_by_key(s, session_key)
        if found is None:
            raise ApiError(404, f"session {session_key!r} not found", field="sessionKey")
        if fmt == "jsonl":
            return StreamingResponse(
                _jsonl(db, principal, found.id, after_seq, limit),
                media_type="application/x-ndjson",
            )
        rows = await list_messages(s, found.id, after_seq=after_seq, limit=page_size + 1)
    page = rows[:page_size]
    return MessagePage(
        session_key=session_key,
        messages=[_message_info(m) for m in page],
        next_after_seq=page[-1].seq if len(rows) > page_size else None,
    )


async def _jsonl(
    db: Database, principal: Principal, session_id: UUID, after_seq: int, limit: int | None
) -> AsyncIterator[bytes]:
    """Messages as NDJSON, read in batches (one short transaction each, none held while sending)."""
    last, remaining = after_seq, limit
    while remaining is None or remaining > 0:
        batch = JSONL_BATCH if remaining is None else min(JSONL_BATCH, remaining)
        async with db.tenant(principal) as s:
            rows = await list_messages(s, session_id, after_seq=last, limit=batch)
        if not rows:
            return
        lines = (
            json.dumps(_message_info(m).model_dump(mode="json", by_alias=True), ensure_ascii=False)
            + "\n"
            for m in rows
        )
        yield "".join(lines).encode()
        last = rows[-1].seq
        if remaining is not None:
            remaining -= len(rows)
        if len(rows) < batch:
            return
