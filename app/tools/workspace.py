"""A session's workspace: durable files in Postgres (`workspace_files`), shared by all workers.

Whichever worker runs the session's next run sees the same files, so tools never touch the
worker's local disk. Paths are plain keys (`dir/sub/file.txt`), normalised and checked by
`normalize_path`; directories exist only as prefixes of file paths. The store has no symlinks
(or any other indirection), so a checked path always names exactly its own row.

The file tools and the HTTP file API (`app/api/routes/files.py`) both go through `Workspace`, so
they share one set of path rules and caps. Failures are `ToolError`s (the tools feed the message
back to the model); their subclasses let the API answer each with its own status.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.principal import Principal
from app.core.errors import ForbiddenError
from app.db.engine import Database
from app.db.models import AgentSession, WorkspaceFile
from app.tools.base import ToolContext, ToolError

MAX_PATH_BYTES = 512
MAX_LIST_ENTRIES = 1000
_DRIVE = re.compile(r"^[A-Za-z]:")


class InvalidPathError(ToolError):
    """A path the workspace refuses (escapes, absolute, control characters, too long, …)."""


class NoSuchFileError(ToolError):
    """No file at the path; `is_directory`: there are files below it."""

    def __init__(self, message: str, *, is_directory: bool = False) -> None:
        super().__init__(message)
        self.is_directory = is_directory


class PathConflictError(ToolError):
    """A write where a directory is, or below a file."""


class FileTooLargeError(ToolError):
    """A file over the per-file cap."""


class WorkspaceFullError(ToolError):
    """A write that would take the workspace over its total cap."""


class WorkspaceUnavailableError(ToolError):
    """The session is not visible to the principal (gone, or another tenant's)."""


def _is_control(ch: str) -> bool:
    return ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F


def normalize_path(path: str) -> str:
    """The canonical workspace path for `path`, or `InvalidPathError`.

    Accepted: relative paths of `/`-separated components; repeated and trailing slashes are
    dropped and the text is NFC-normalised. Rejected: empty paths, absolute paths (`/x`, `C:x`),
    home-relative paths (`~x`), backslashes, NUL and other control characters, `..` components
    (even when they would resolve inside the workspace), components made only of dots (`.`,
    `...`), and paths longer than 512 bytes (UTF-8).
    """
    if not isinstance(path, str) or not path.strip():
        raise InvalidPathError("path is empty")
    if any(_is_control(ch) for ch in path):
        raise InvalidPathError("path contains control characters")
    if "\\" in path:
        raise InvalidPathError(f"path {path!r} contains a backslash; use '/' as the separator")
    if path.startswith("/") or _DRIVE.match(path):
        raise InvalidPathError(f"path {path!r} is absolute; use a path relative to the workspace")
    if path.startswith("~"):
        raise InvalidPathError(
            f"path {path!r} starts with '~'; use a path relative to the workspace"
        )
    parts = [p for p in unicodedata.normalize("NFC", path).split("/") if p]
    for part in parts:
        if part == "..":
            raise InvalidPathError(f"path {path!r} contains '..'; paths may not leave their folder")
        if set(part) == {"."}:
            raise InvalidPathError(f"path {path!r} contains a {part!r} component")
    normalized = "/".join(parts)
    if len(normalized.encode()) > MAX_PATH_BYTES:
        raise InvalidPathError(f"path is longer than {MAX_PATH_BYTES} bytes")
    return normalized


@dataclass(frozen=True, slots=True)
class FileInfo:
    """A stored file's path, size in bytes and SHA-256 (hex)."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class FileEntry:
    """A stored file as the file API lists it: `FileInfo` plus its timestamps."""

    path: str
    size: int
    sha256: str
    created_at: datetime
    updated_at: datetime


def _under(prefix: str) -> str:
    return prefix + "/"


def _entry(row: Any) -> FileEntry:
    return FileEntry(row.path, row.size, row.sha256, row.created_at, row.updated_at)


# Paths are ordered by code point (= UTF-8 byte order, = Python's str order) whatever the
# database's collation, so that keyset pages are stable and match `sorted()`.
_path_in_c = WorkspaceFile.path.collate("C")
_ENTRY_COLUMNS = (
    WorkspaceFile.path,
    WorkspaceFile.size,
    WorkspaceFile.sha256,
    WorkspaceFile.created_at,
    WorkspaceFile.updated_at,
)


class Workspace:
    """The files of one session, read and written as the session's tenant (RLS)."""

    def __init__(
        self,
        db: Database,
        principal: Principal,
        session_id: UUID,
        *,
        max_file_bytes: int,
        max_total_bytes: int,
    ) -> None:
        self.db = db
        self.principal = principal
        self.session_id = session_id
        self.max_file_bytes = max_file_bytes
        self.max_total_bytes = max_total_bytes

    @classmethod
    async def for_session_key(
        cls,
        db: Database,
        principal: Principal,
        session_key: str,
        *,
        max_file_bytes: int,
        max_total_bytes: int,
        writable: bool = False,
    ) -> Workspace | None:
        """The workspace of the principal's session `session_key`; None when the caller cannot
        see such a session (another tenant's, another member's private one: RLS).

        `writable`: the caller means to change it — ForbiddenError for a member and a session
        shared by someone else (read-only to them).
        """
        async with db.tenant(principal) as s:
            row = (
                await s.execute(
                    select(AgentSession.id, AgentSession.user_id).where(
                        AgentSession.session_key == session_key
                    )
                )
            ).one_or_none()
        if row is None:
            return None
        session_id, owner = row
        if writable and principal.role == "member" and owner != principal.user_id:
            raise ForbiddenError(
                f"session {session_key!r} is shared read-only by its user: members may read "
                "its files but not change them",
                code="read_only_session",
                field="sessionKey",
            )
        return cls(
            db,
            principal,
            session_id,
            max_file_bytes=max_file_bytes,
            max_total_bytes=max_total_bytes,
        )

    @classmethod
    def for_tool(cls, ctx: ToolContext) -> Workspace:
        """The workspace of the session a tool call runs in, with the configured caps."""
        return cls(
            ctx.db,
            ctx.principal,
            ctx.session_id,
            max_file_bytes=ctx.settings.workspace_max_file_bytes,
            max_total_bytes=ctx.settings.workspace_max_total_bytes,
        )

    async def write(self, path: str, content: bytes) -> FileInfo:
        """Create or replace the file at `path` (normalised), within the size caps."""
        entry, _created = await self.put(path, content)
        return FileInfo(path=entry.path, size=entry.size, sha256=entry.sha256)

    async def put(self, path: str, content: bytes) -> tuple[FileEntry, bool]:
        """Create or replace the file at `path` (normalised), within the size caps; the stored
        file, and whether it was created (False: replaced)."""
        path = normalize_path(path)
        size = len(content)
        if size > self.max_file_bytes:
            raise FileTooLargeError(
                f"{path}: {size} bytes exceeds the per-file limit of {self.max_file_bytes} bytes"
            )
        digest = hashlib.sha256(content).hexdigest()
        async with self.db.tenant(self.principal) as s:
            # Lock the session row: concurrent writers of one workspace are serialised, so the
            # total-size check below cannot be raced past.
            locked = await s.scalar(
                select(AgentSession.id).where(AgentSession.id == self.session_id).with_for_update()
            )
            if locked is None:
                raise WorkspaceUnavailableError("the session's workspace is not accessible")
            await self._check_no_conflict(s, path)
            # Locked too, so a concurrent delete cannot make "replaced" untrue before we commit.
            existed = await s.scalar(
                select(WorkspaceFile.path)
                .where(WorkspaceFile.session_id == self.session_id, WorkspaceFile.path == path)
                .with_for_update()
            )
            others = await s.scalar(
                select(func.coalesce(func.sum(WorkspaceFile.size), 0)).where(
                    WorkspaceFile.session_id == self.session_id, WorkspaceFile.path != path
                )
            )
            if (others or 0) + size > self.max_total_bytes:
                raise WorkspaceFullError(
                    f"{path}: writing {size} bytes would exceed the workspace limit of "
                    f"{self.max_total_bytes} bytes ({others} bytes used by other files)"
                )
            row = (
                await s.execute(
                    insert(WorkspaceFile)
                    .values(
                        tenant_id=self.principal.tenant_id,
                        session_id=self.session_id,
                        path=path,
                        content=content,
                        size=size,
                        sha256=digest,
                    )
                    .on_conflict_do_update(
                        index_elements=[WorkspaceFile.session_id, WorkspaceFile.path],
                        set_={
                            "content": content,
                            "size": size,
                            "sha256": digest,
                            "updated_at": func.now(),
                        },
                    )
                    .returning(*_ENTRY_COLUMNS)
                )
            ).one()
        return _entry(row), existed is None

    async def read(self, path: str) -> tuple[FileInfo, bytes]:
        """The file at `path` (normalised); `NoSuchFileError` if there is none."""
        entry, content = await self.read_entry(path)
        return FileInfo(path=entry.path, size=entry.size, sha256=entry.sha256), content

    async def read_entry(self, path: str) -> tuple[FileEntry, bytes]:
        """The file at `path` (normalised) with its timestamps, and its content;
        `NoSuchFileError` if there is none (its message says when `path` is a directory)."""
        path = normalize_path(path)
        async with self.db.tenant(self.principal) as s:
            row = (
                await s.execute(
                    select(*_ENTRY_COLUMNS, WorkspaceFile.content).where(
                        WorkspaceFile.session_id == self.session_id, WorkspaceFile.path == path
                    )
                )
            ).one_or_none()
            if row is None:
                if await self._has_files_under(s, path):
                    raise NoSuchFileError(
                        f"{path} is a directory; use list_files", is_directory=True
                    )
                raise NoSuchFileError(f"no such file: {path}")
        return _entry(row), bytes(row.content)

    async def page(
        self, prefix: str | None = None, *, after: str | None = None, limit: int = 200
    ) -> list[FileEntry]:
        """Up to `limit` files under directory `prefix` (all if None) whose path sorts after
        `after` (keyset), in path order. A `prefix` that names a file lists nothing."""
        directory = None if prefix is None else normalize_path(prefix)
        query = select(*_ENTRY_COLUMNS).where(WorkspaceFile.session_id == self.session_id)
        if directory is not None:
            query = query.where(WorkspaceFile.path.startswith(_under(directory), autoescape=True))
        if after is not None:
            query = query.where(_path_in_c > after)
        async with self.db.tenant(self.principal) as s:
            rows = (await s.execute(query.order_by(_path_in_c).limit(limit))).all()
        return [_entry(r) for r in rows]

    async def list_files(self, prefix: str | None = None) -> tuple[list[FileInfo], bool]:
        """Files under directory `prefix` (all files if None), sorted; and whether cut short."""
        directory = None if prefix is None else normalize_path(prefix)
        async with self.db.tenant(self.principal) as s:
            query = select(WorkspaceFile.path, WorkspaceFile.size, WorkspaceFile.sha256).where(
                WorkspaceFile.session_id == self.session_id
            )
            if directory is not None:
                if await self._exists(s, directory):
                    raise ToolError(f"{directory} is a file, not a directory; use read_file")
                query = query.where(
                    WorkspaceFile.path.startswith(_under(directory), autoescape=True)
                )
            rows = (await s.execute(query.order_by(WorkspaceFile.path))).all()
        files = sorted((FileInfo(r.path, r.size, r.sha256) for r in rows), key=lambda f: f.path)
        return files[:MAX_LIST_ENTRIES], len(files) > MAX_LIST_ENTRIES

    async def read_all(self) -> list[tuple[FileInfo, bytes]]:
        """Every file of the workspace with its content, sorted by path (bounded by the caps)."""
        async with self.db.tenant(self.principal) as s:
            rows = (
                await s.execute(
                    select(
                        WorkspaceFile.path,
                        WorkspaceFile.size,
                        WorkspaceFile.sha256,
                        WorkspaceFile.content,
                    )
                    .where(WorkspaceFile.session_id == self.session_id)
                    .order_by(WorkspaceFile.path)
                )
            ).all()
        return [(FileInfo(r.path, r.size, r.sha256), bytes(r.content)) for r in rows]

    async def delete(self, path: str) -> bool:
        """Remove the file at `path` (normalised); whether there was one."""
        path = normalize_path(path)
        async with self.db.tenant(self.principal) as s:
            gone = await s.scalar(
                delete(WorkspaceFile)
                .where(WorkspaceFile.session_id == self.session_id, WorkspaceFile.path == path)
                .returning(WorkspaceFile.path)
            )
        return gone is not None

    async def _exists(self, s: AsyncSession, path: str) -> bool:
        found = await s.scalar(
            select(WorkspaceFile.path).where(
                WorkspaceFile.session_id == self.session_id, WorkspaceFile.path == path
            )
        )
        return found is not None

    async def _has_files_under(self, s: AsyncSession, path: str) -> bool:
        found = await s.scalar(
            select(WorkspaceFile.path)
            .where(
                WorkspaceFile.session_id == self.session_id,
                WorkspaceFile.path.startswith(_under(path), autoescape=True),
            )
            .limit(1)
        )
        return found is not None

    async def _check_no_conflict(self, s: AsyncSession, path: str) -> None:
        """A file may not sit where a directory is, nor below a file."""
        parts = path.split("/")
        parents = ["/".join(parts[:i]) for i in range(1, len(parts))]
        if parents:
            clash = await s.scalar(
                select(WorkspaceFile.path)
                .where(WorkspaceFile.session_id == self.session_id, WorkspaceFile.path.in_(parents))
                .limit(1)
            )
            if clash is not None:
                raise PathConflictError(f"cannot write {path}: {clash} is a file")
        if await self._has_files_under(s, path):
            raise PathConflictError(f"cannot write {path}: it is a directory")
