"""The workspace file tools (group `fs`): `write_file`, `read_file`, `list_files`, `edit_file`,
`delete_file` (see `workspace.py` for paths and the per-file and per-workspace caps).

`read_file` pages a UTF-8 text file by lines: `offset` is the 0-based index of the first line
returned and `limit` the number of lines (default 2000); at most 100,000 characters are returned
per call, and `truncated` says whether more lines follow. A file that is not UTF-8 is returned as
base64 (`encoding: "base64"`), paged by bytes (`offset`/`limit` count bytes, at most 75,000 per
call), so binary files are never corrupted; `write_file` takes `encoding: "base64"` to store
bytes. `edit_file` replaces text that must occur exactly once.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from app.tools.base import Tool, ToolContext, ToolError
from app.tools.workspace import MAX_PATH_BYTES, Workspace, normalize_path

READ_DEFAULT_LINES = 2000
READ_MAX_LINES = 100_000
READ_MAX_CHARS = 100_000
READ_MAX_BYTES = READ_MAX_CHARS // 4 * 3  # base64 of this many bytes is READ_MAX_CHARS chars

_PATH = {"type": "string", "minLength": 1, "maxLength": MAX_PATH_BYTES}


class WriteFile(Tool):
    """Create or replace a text file in the session's workspace."""

    name = "write_file"
    description = (
        "Create or overwrite a file in the session workspace. `path` is relative (e.g. "
        "`notes/todo.md`); parent folders need not exist. `content` is UTF-8 text, or base64 "
        'bytes with `encoding: "base64"` (binary files).'
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {**_PATH, "description": "Relative file path."},
            "content": {"type": "string", "description": "The whole new file content."},
            "encoding": {
                "enum": ["utf-8", "base64"],
                "description": "How `content` is encoded (default utf-8).",
            },
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }
    idempotent = True  # writing the same content twice leaves the same file
    risk = "medium"

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """Store the content; returns the normalised path, size in bytes and SHA-256."""
        content: str = args["content"]
        if args.get("encoding") == "base64":
            try:
                data = base64.b64decode(content, validate=True)
            except (binascii.Error, ValueError):
                raise ToolError("content is not valid base64") from None
        else:
            data = content.encode()
        info = await Workspace.for_tool(ctx).write(args["path"], data)
        return {"path": info.path, "size": info.size, "sha256": info.sha256}


class ReadFile(Tool):
    """Read a text file (or a range of its lines) from the session's workspace."""

    name = "read_file"
    description = (
        "Read a UTF-8 text file from the session workspace. Optional `offset` (0-based first "
        f"line) and `limit` (number of lines, default {READ_DEFAULT_LINES}) page through long files. "
        'A file that is not UTF-8 comes back base64-encoded (`encoding: "base64"`), and then '
        f"`offset`/`limit` count bytes (at most {READ_MAX_BYTES} per call)."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {**_PATH, "description": "Relative file path."},
            "offset": {"type": "integer", "minimum": 0, "description": "First line (0-based)."},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": READ_MAX_LINES,
                "description": "Maximum number of lines.",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    idempotent = True

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """The requested lines, with the file's total line count and a `truncated` flag."""
        info, data = await Workspace.for_tool(ctx).read(args["path"])
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return _read_bytes(info.path, data, args)
        lines = text.splitlines(keepends=True)
        offset: int = args.get("offset", 0)
        limit: int = args.get("limit", READ_DEFAULT_LINES)
        if offset > len(lines) or (offset == len(lines) and offset > 0):
            raise ToolError(f"offset {offset} is past the end of {info.path} ({len(lines)} lines)")
        picked: list[str] = []
        chars = 0
        for line in lines[offset : offset + limit]:
            if picked and chars + len(line) > READ_MAX_CHARS:
                break
            picked.append(line)
            chars += len(line)
        content = "".join(picked)[:READ_MAX_CHARS]
        return {
            "path": info.path,
            "content": content,
            "offset": offset,
            "lines": len(picked),
            "totalLines": len(lines),
            "truncated": offset + len(picked) < len(lines) or len(content) < chars,
            "encoding": "utf-8",
        }


def _read_bytes(path: str, data: bytes, args: dict[str, Any]) -> dict[str, Any]:
    """A range of a binary file, base64-encoded."""
    offset: int = args.get("offset", 0)
    limit: int = min(args.get("limit", READ_MAX_BYTES), READ_MAX_BYTES)
    if offset > len(data) or (offset == len(data) and offset > 0):
        raise ToolError(f"offset {offset} is past the end of {path} ({len(data)} bytes)")
    chunk = data[offset : offset + limit]
    return {
        "path": path,
        "encoding": "base64",
        "content": base64.b64encode(chunk).decode("ascii"),
        "offset": offset,
        "bytes": len(chunk),
        "totalBytes": len(data),
        "truncated": offset + len(chunk) < len(data),
    }


class ListFiles(Tool):
    """List the files of the session's workspace, or of one folder of it."""

    name = "list_files"
    description = (
        "List files in the session workspace (recursively, sorted by path) with their sizes. "
        "Optional `path` restricts the listing to that folder."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"path": {**_PATH, "description": "Folder to list (default: all)."}},
        "additionalProperties": False,
    }
    idempotent = True

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """`{"path", "files": [{"path", "size"}], "truncated"}`."""
        raw = args.get("path")
        prefix = None if raw is None or raw.strip() in ("", ".", "./") else normalize_path(raw)
        files, truncated = await Workspace.for_tool(ctx).list_files(prefix)
        return {
            "path": prefix or "",
            "files": [{"path": f.path, "size": f.size} for f in files],
            "truncated": truncated,
        }


class EditFile(Tool):
    """Replace one exact piece of text in a text file of the session's workspace."""

    name = "edit_file"
    description = (
        "Edit a UTF-8 text file in the session workspace: replace `old_text` with `new_text`. "
        "`old_text` must occur exactly once in the file (include surrounding lines to make it "
        "unique); whitespace and line breaks must match exactly."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {**_PATH, "description": "Relative file path."},
            "old_text": {"type": "string", "minLength": 1, "description": "Text to replace."},
            "new_text": {"type": "string", "description": "Its replacement."},
        },
        "required": ["path", "old_text", "new_text"],
        "additionalProperties": False,
    }
    idempotent = False  # after a replacement, the same edit no longer finds its text
    risk = "medium"

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """`{"path", "size", "sha256", "replacedAtLine"}`."""
        workspace = Workspace.for_tool(ctx)
        info, data = await workspace.read(args["path"])
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{info.path} is not UTF-8 text; edit_file edits text files") from None
        old: str = args["old_text"]
        count = text.count(old)
        if count == 0:
            raise ToolError(f"old_text was not found in {info.path}; nothing was changed")
        if count > 1:
            raise ToolError(
                f"old_text occurs {count} times in {info.path}; include more surrounding text "
                "so that it occurs exactly once (nothing was changed)"
            )
        at = text.index(old)
        written = await workspace.write(
            info.path, (text[:at] + args["new_text"] + text[at + len(old) :]).encode()
        )
        return {
            "path": written.path,
            "size": written.size,
            "sha256": written.sha256,
            "replacedAtLine": text.count("\n", 0, at) + 1,
        }


class DeleteFile(Tool):
    """Delete one file of the session's workspace."""

    name = "delete_file"
    description = "Delete a file from the session workspace (not a folder)."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"path": {**_PATH, "description": "Relative file path."}},
        "required": ["path"],
        "additionalProperties": False,
    }
    idempotent = False  # a second run would report "no such file"
    risk = "medium"

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """`{"path", "deleted": true}`."""
        workspace = Workspace.for_tool(ctx)
        path = normalize_path(args["path"])
        if not await workspace.delete(path):
            files, _ = await workspace.list_files(path)  # a directory lists its files
            if files:
                raise ToolError(f"{path} is a directory; delete its files one by one")
            raise ToolError(f"no such file: {path}")
        return {"path": path, "deleted": True}


def workspace_tools() -> list[Tool]:
    """One instance of each workspace tool."""
    return [WriteFile(), ReadFile(), ListFiles(), EditFile(), DeleteFile()]
