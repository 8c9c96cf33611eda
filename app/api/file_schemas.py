"""Response bodies of the workspace file API (`app/api/routes/files.py`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from app.api.downloads import guess_type
from app.api.schemas import ApiModel
from app.tools.workspace import FileEntry

_SHA = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
_TS = "2025-01-01T12:00:00Z"


class WorkspaceFileInfo(ApiModel):
    """A file of a session's workspace."""

    path: str = Field(examples=["notes/todo.md"], description="Normalised relative path.")
    size: int = Field(examples=[3], description="Bytes.")
    content_type: str | None = Field(
        examples=["text/markdown"],
        description="Guessed from the name (as a download serves it); null when unknown.",
    )
    sha256: str = Field(examples=[_SHA], description="SHA-256 of the content (hex); the ETag.")
    created_at: datetime = Field(examples=[_TS])
    updated_at: datetime = Field(examples=[_TS])

    @classmethod
    def of(cls, entry: FileEntry) -> WorkspaceFileInfo:
        """The API view of a stored file."""
        return cls(
            path=entry.path,
            size=entry.size,
            content_type=guess_type(entry.path),
            sha256=entry.sha256,
            created_at=entry.created_at,
            updated_at=entry.updated_at,
        )


class WorkspaceFilePage(ApiModel):
    """A page of a session's files, in path order."""

    session_key: str = Field(examples=["chat:42"])
    prefix: str | None = Field(description="The folder listed (normalised); null: every file.")
    files: list[WorkspaceFileInfo]
    next_cursor: str | None = Field(
        description="Pass as `after` to get the next page (it is the last path of this page); "
        "null on the last page."
    )
