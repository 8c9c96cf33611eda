"""A session's workspace files for frontends: list, download, upload, delete.

The same store as the agent's file tools (`app/tools/workspace.py`): the same path rules and
per-file and per-workspace caps, read and written as the caller's tenant (RLS), so a file the
agent wrote is downloadable here and an uploaded file is what `read_file` reads. Another
tenant's session is 404. Files live in existing sessions only (a session is created by its first
message), as for the tools. Downloads are always attachments with defensive headers
(`app/api/downloads.py`).

Uploads are raw bytes of any content type, limited to `WORKSPACE_MAX_FILE_BYTES` by this route
rather than by the app's 1 MiB JSON body limit (`is_upload` exempts them from it).
"""

from __future__ import annotations

import re
from email.utils import format_datetime
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Header, Path, Query, Request, Response
from starlette.types import Scope

from app.api.deps import CurrentPrincipal, DatabaseDep, SettingsDep
from app.api.downloads import (
    DOWNLOAD_CSP,
    content_disposition,
    content_type,
    etag,
    etag_matches,
)
from app.api.errors import ApiError
from app.api.file_schemas import WorkspaceFileInfo, WorkspaceFilePage
from app.api.routes.sessions import SessionKeyPath
from app.api.schemas import ErrorResponse, error_responses
from app.auth.principal import Principal
from app.config import Settings
from app.db.engine import Database
from app.tools.workspace import (
    MAX_LIST_ENTRIES,
    MAX_PATH_BYTES,
    FileTooLargeError,
    InvalidPathError,
    NoSuchFileError,
    PathConflictError,
    Workspace,
    WorkspaceFullError,
    WorkspaceUnavailableError,
    normalize_path,
)

PREFIX = "/api/agent-runtime/sessions"
router = APIRouter(prefix=PREFIX, tags=["files"])

_UPLOAD_PATH = re.compile(rf"^{re.escape(PREFIX)}/[^/]+/files/")

# Part of the path rules, for the OpenAPI document only (`normalize_path` checks them all and
# says what is wrong): at most 512 characters (and bytes), not absolute, not `~`, no control
# characters or backslashes.
_PATH_RULES: dict[str, Any] = {
    "maxLength": MAX_PATH_BYTES,
    "pattern": r"^(?![/~]|[A-Za-z]:)[^\x00-\x1f\x7f-\x9f\\]+$",
}
_PREFIX_RULES = _PATH_RULES | {"pattern": _PATH_RULES["pattern"].replace("]+$", "]*$")}

FilePath = Annotated[
    str,
    Path(
        alias="path",
        description="The file's path in the workspace, relative, `/`-separated (at most "
        f"{MAX_PATH_BYTES} bytes of UTF-8; no `..`, absolute paths, backslashes or control "
        "characters).",
        examples=["notes/todo.md"],
        json_schema_extra=_PATH_RULES,
    ),
]

_FILE_HEADERS: dict[str, Any] = {
    "ETag": {"description": "The SHA-256 of the content, quoted.", "schema": {"type": "string"}},
}
_DOWNLOAD_HEADERS: dict[str, Any] = {
    **_FILE_HEADERS,
    "Content-Disposition": {
        "description": "Always `attachment`, with `filename` (ASCII) and `filename*` (UTF-8).",
        "schema": {"type": "string"},
    },
    "X-Content-Type-Options": {"schema": {"type": "string", "enum": ["nosniff"]}},
    "Last-Modified": {"schema": {"type": "string"}},
}
_UPLOAD_ERRORS: dict[int | str, dict[str, Any]] = {
    409: {
        "model": ErrorResponse,
        "description": "The path is a folder (it has files below it), or below a file.",
    },
    413: {
        "model": ErrorResponse,
        "description": "The file is over the per-file limit (`WORKSPACE_MAX_FILE_BYTES`), or "
        "the workspace would be over its total (`WORKSPACE_MAX_TOTAL_BYTES`, code "
        "`workspace_full`).",
    },
}


def is_upload(scope: Scope) -> bool:
    """Whether a request is a file upload (its body is limited here, not by `BodySizeLimit`)."""
    return scope.get("method") == "PUT" and bool(_UPLOAD_PATH.match(scope.get("path", "")))


def _checked(raw: str, field: str) -> str:
    """The normalised path, or a 422 naming `field`."""
    try:
        return normalize_path(raw)
    except InvalidPathError as exc:
        raise ApiError(422, f"{field}: {exc.message}", field=field) from exc


async def _workspace(
    db: Database,
    principal: Principal,
    settings: Settings,
    session_key: str,
    *,
    writable: bool = False,
) -> Workspace:
    workspace = await Workspace.for_session_key(
        db,
        principal,
        session_key,
        max_file_bytes=settings.workspace_max_file_bytes,
        max_total_bytes=settings.workspace_max_total_bytes,
        writable=writable,
    )
    if workspace is None:
        raise ApiError(404, f"session {session_key!r} not found", field="sessionKey")
    return workspace


def _too_large(limit: int) -> ApiError:
    return ApiError(
        413, f"the file is larger than the per-file limit of {limit} bytes", field="body"
    )


async def _read_body(request: Request, limit: int) -> bytes:
    """The request body, refused (413) as soon as it is over `limit` bytes."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _too_large(limit)
    return bytes(body)


# ------------------------------------------------------------------ routes


@router.get(
    "/{sessionKey}/files",
    response_model=WorkspaceFilePage,
    responses=error_responses(401, 404, 422),
)
async def list_files(
    principal: CurrentPrincipal,
    db: DatabaseDep,
    settings: SettingsDep,
    session_key: SessionKeyPath,
    prefix: Annotated[
        str | None,
        Query(
            description="Only files in this folder (and its subfolders); empty: every file.",
            json_schema_extra=_PREFIX_RULES,
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_ENTRIES, description="Page size.")] = 200,
    after: Annotated[
        str | None,
        Query(
            description="`nextCursor` of the previous page (the last path it listed): only "
            "files whose path sorts after it (by code point).",
            json_schema_extra=_PATH_RULES,
        ),
    ] = None,
) -> WorkspaceFilePage:
    """A session's workspace files in path order (keyset-paginated)."""
    folder = None if prefix is None or prefix.strip() in ("", ".", "./") else prefix
    folder = None if folder is None else _checked(folder, "prefix")
    cursor = None if after is None else _checked(after, "after")
    workspace = await _workspace(db, principal, settings, session_key)
    rows = await workspace.page(folder, after=cursor, limit=limit + 1)
    page = rows[:limit]
    return WorkspaceFilePage(
        session_key=session_key,
        prefix=folder,
        files=[WorkspaceFileInfo.of(r) for r in page],
        next_cursor=page[-1].path if len(rows) > limit else None,
    )


@router.get(
    "/{sessionKey}/files/{path:path}",
    response_class=Response,
    responses={
        200: {
            "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
            "description": "The file's bytes, as an attachment (type guessed from the name).",
            "headers": _DOWNLOAD_HEADERS,
        },
        304: {"description": "Unchanged (`If-None-Match` matched the ETag)."},
        **error_responses(401, 404, 422),
    },
)
async def download_file(
    principal: CurrentPrincipal,
    db: DatabaseDep,
    settings: SettingsDep,
    session_key: SessionKeyPath,
    path: FilePath,
    if_none_match: Annotated[str | None, Header(max_length=4096)] = None,
) -> Response:
    """Download one file (always as an attachment; `If-None-Match` → 304 when unchanged)."""
    path = _checked(path, "path")
    workspace = await _workspace(db, principal, settings, session_key)
    try:
        entry, content = await workspace.read_entry(path)
    except NoSuchFileError as exc:
        hint = " (it is a folder: list it with ?prefix=)" if exc.is_directory else ""
        raise ApiError(404, f"no such file: {path}{hint}", field="path") from exc
    tag = etag(entry.sha256)
    headers = {
        "ETag": tag,
        "Last-Modified": format_datetime(entry.updated_at, usegmt=True),
        "Cache-Control": "private, no-cache",
        "X-Content-Type-Options": "nosniff",
    }
    if if_none_match is not None and etag_matches(if_none_match, tag):
        return Response(status_code=304, headers=headers)
    headers |= {
        "Content-Disposition": content_disposition(entry.path),
        "Content-Security-Policy": DOWNLOAD_CSP,
    }
    return Response(content, media_type=content_type(entry.path, content), headers=headers)


@router.put(
    "/{sessionKey}/files/{path:path}",
    status_code=201,
    response_model=WorkspaceFileInfo,
    responses={
        200: {"model": WorkspaceFileInfo, "description": "Replaced.", "headers": _FILE_HEADERS},
        201: {"description": "Created.", "headers": _FILE_HEADERS},
        **error_responses(401, 403, 404, 422),
        **_UPLOAD_ERRORS,
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "The file's content: raw bytes, any content type (it is not stored; "
            "downloads guess the type from the name).",
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
)
async def upload_file(
    principal: CurrentPrincipal,
    db: DatabaseDep,
    settings: SettingsDep,
    session_key: SessionKeyPath,
    path: FilePath,
    request: Request,
    response: Response,
) -> WorkspaceFileInfo:
    """Create (201) or replace (200) one file with the request body."""
    path = _checked(path, "path")
    limit = settings.workspace_max_file_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)  # before reading a byte of it
    workspace = await _workspace(db, principal, settings, session_key, writable=True)
    content = await _read_body(request, limit)
    try:
        entry, created = await workspace.put(path, content)
    except FileTooLargeError as exc:
        raise _too_large(limit) from exc
    except WorkspaceFullError as exc:
        raise ApiError(413, exc.message, code="workspace_full", field="body") from exc
    except PathConflictError as exc:
        raise ApiError(409, exc.message, field="path") from exc
    except WorkspaceUnavailableError as exc:
        raise ApiError(404, f"session {session_key!r} not found", field="sessionKey") from exc
    response.status_code = 201 if created else 200
    response.headers["ETag"] = etag(entry.sha256)
    if created:
        response.headers["Location"] = (
            f"{PREFIX}/{quote(session_key, safe='')}/files/{quote(entry.path)}"
        )
    return WorkspaceFileInfo.of(entry)


@router.delete(
    "/{sessionKey}/files/{path:path}",
    status_code=204,
    response_class=Response,
    responses=error_responses(401, 403, 404, 422),
)
async def delete_file(
    principal: CurrentPrincipal,
    db: DatabaseDep,
    settings: SettingsDep,
    session_key: SessionKeyPath,
    path: FilePath,
) -> Response:
    """Delete one file (not a folder)."""
    path = _checked(path, "path")
    workspace = await _workspace(db, principal, settings, session_key, writable=True)
    if not await workspace.delete(path):
        raise ApiError(404, f"no such file: {path}", field="path")
    return Response(status_code=204)
