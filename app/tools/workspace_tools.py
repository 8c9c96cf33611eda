"""The workspace file tools: `write_file`, `read_file`, `list_files` (see `workspace.py`).

`read_file` pages by lines: `offset` is the 0-based index of the first line returned and `limit`
the number of lines (default 2000); at most 100,000 characters are returned per call, and
`truncated` says whether more lines follow.
"""

from __future__ import annotations

from typing import Any

from app.tools.base import Tool, ToolContext, ToolError
from app.tools.workspace import MAX_PATH_BYTES, Workspace, normalize_path

READ_DEFAULT_LINES = 2000
READ_MAX_LINES = 100_000
READ_MAX_CHARS = 100_000

_PATH = {"type": "string", "minLength": 1, "maxLength": MAX_PATH_BYTES}


class WriteFile(Tool):
    """Create or replace a text file in the session's workspace."""

    name = "write_file"
    description = (
        "Create or overwrite a UTF-8 text file in the session workspace. "
        "`path` is relative (e.g. `notes/todo.md`); parent folders need not exist."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "path": {**_PATH, "description": "Relative file path."},
            "content": {"type": "string", "description": "The whole new file content."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }
    idempotent = True  # writing the same content twice leaves the same file

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """Store the content; returns the normalised path, size in bytes and SHA-256."""
        info = await Workspace.for_tool(ctx).write(args["path"], args["content"].encode())
        return {"path": info.path, "size": info.size, "sha256": info.sha256}


class ReadFile(Tool):
    """Read a text file (or a range of its lines) from the session's workspace."""

    name = "read_file"
    description = (
        "Read a UTF-8 text file from the session workspace. Optional `offset` (0-based first "
        f"line) and `limit` (number of lines, default {READ_DEFAULT_LINES}) page through long files."
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
            raise ToolError(f"{info.path} is not UTF-8 text ({info.size} bytes)") from None
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


def workspace_tools() -> list[Tool]:
    """One instance of each workspace tool."""
    return [WriteFile(), ReadFile(), ListFiles()]
