"""edit_file, delete_file and binary files against the real Postgres: happy paths and attacks."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest

from app.auth.principal import Principal
from app.core.transcript import ToolCall, ToolResult
from app.db.engine import Database
from app.tools.base import ToolContext
from app.tools.registry import ToolRegistry
from app.tools.workspace import Workspace
from app.tools.workspace_tools import READ_MAX_BYTES, workspace_tools
from tests.integration.tool_support import context_for

BLOB = bytes(range(256)) * 3 + b"\xff\xfe\x00\x80"


@pytest.fixture
def tools() -> ToolRegistry:
    return ToolRegistry(workspace_tools())


async def call(tools: ToolRegistry, ctx: ToolContext, name: str, **args: Any) -> ToolResult:
    return await tools.execute(ctx, ToolCall(id="c", name=name, args=args))


async def content(ctx: ToolContext, path: str) -> bytes:
    return (await Workspace.for_tool(ctx).read(path))[1]


# ---------------------------------------------------------------------------- edit_file


async def test_edit_replaces_exactly_one_occurrence(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, "ws")
    await call(tools, ctx, "write_file", path="src/app.py", content="a = 1\nb = 2\nc = 3\n")
    r = await call(tools, ctx, "edit_file", path="src/app.py", old_text="b = 2", new_text="b = 20")
    assert r.ok, r.error
    assert r.result["replacedAtLine"] == 2 and r.result["path"] == "src/app.py"
    assert await content(ctx, "src/app.py") == b"a = 1\nb = 20\nc = 3\n"
    assert r.result["sha256"] == hashlib.sha256(b"a = 1\nb = 20\nc = 3\n").hexdigest()
    # multi-line old_text with exact whitespace; deleting text with an empty new_text
    r = await call(tools, ctx, "edit_file", path="src/app.py", old_text="1\nb", new_text="1\n\nb")
    assert r.ok and await content(ctx, "src/app.py") == b"a = 1\n\nb = 20\nc = 3\n"
    r = await call(tools, ctx, "edit_file", path="src/app.py", old_text="c = 3\n", new_text="")
    assert r.ok and await content(ctx, "src/app.py") == b"a = 1\n\nb = 20\n"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"old_text": "zzz", "new_text": "y"}, "old_text was not found in f.txt"),
        ({"old_text": "x", "new_text": "y"}, "old_text occurs 3 times in f.txt"),
        ({"old_text": "X", "new_text": "y"}, "was not found"),  # exact, case-sensitive
        ({"old_text": "", "new_text": "y"}, "should be non-empty"),
        ({"old_text": "x"}, "'new_text' is a required property"),
    ],
)
async def test_edit_refuses_ambiguous_or_missing_text(
    database: Database, alice: Principal, tools: ToolRegistry, args: dict[str, Any], fragment: str
) -> None:
    ctx = await context_for(database, alice, "ws")
    await call(tools, ctx, "write_file", path="f.txt", content="x x x")
    r = await call(tools, ctx, "edit_file", path="f.txt", **args)
    assert not r.ok and fragment in (r.error or ""), r.error
    assert await content(ctx, "f.txt") == b"x x x"  # unchanged


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("../other/f.txt", "contains '..'"),
        ("/etc/passwd", "is absolute"),
        ("missing.txt", "no such file: missing.txt"),
        ("dir", "dir is a directory"),
    ],
)
async def test_edit_bad_paths(
    database: Database, alice: Principal, tools: ToolRegistry, path: str, fragment: str
) -> None:
    ctx = await context_for(database, alice, "ws")
    await call(tools, ctx, "write_file", path="dir/f.txt", content="x")
    r = await call(tools, ctx, "edit_file", path=path, old_text="x", new_text="y")
    assert not r.ok and fragment in (r.error or ""), r.error


async def test_edit_refuses_binary_files_and_respects_the_size_cap(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, "ws", workspace_max_file_bytes=12)
    await Workspace.for_tool(ctx).write("blob.bin", b"\xff\xfex")
    r = await call(tools, ctx, "edit_file", path="blob.bin", old_text="x", new_text="y")
    assert not r.ok and "not UTF-8 text" in (r.error or "")
    assert await content(ctx, "blob.bin") == b"\xff\xfex"
    await call(tools, ctx, "write_file", path="t.txt", content="0123456789")
    r = await call(tools, ctx, "edit_file", path="t.txt", old_text="9", new_text="99999")
    assert not r.ok and "exceeds the per-file limit of 12 bytes" in (r.error or "")
    assert await content(ctx, "t.txt") == b"0123456789"


# ---------------------------------------------------------------------------- delete_file


async def test_delete_file(database: Database, alice: Principal, tools: ToolRegistry) -> None:
    ctx = await context_for(database, alice, "ws")
    await call(tools, ctx, "write_file", path="notes/a.txt", content="a")
    await call(tools, ctx, "write_file", path="notes/b.txt", content="b")
    r = await call(tools, ctx, "delete_file", path="notes//a.txt")
    assert r.ok and r.result == {"path": "notes/a.txt", "deleted": True}
    listed = await call(tools, ctx, "list_files")
    assert [f["path"] for f in listed.result["files"]] == ["notes/b.txt"]

    for path, fragment in [
        ("notes/a.txt", "no such file: notes/a.txt"),
        ("notes", "notes is a directory"),
        ("../notes/b.txt", "contains '..'"),
        ("~/b.txt", "starts with '~'"),
    ]:
        r = await call(tools, ctx, "delete_file", path=path)
        assert not r.ok and fragment in (r.error or ""), (path, r.error)
    assert await content(ctx, "notes/b.txt") == b"b"


async def test_delete_cannot_reach_another_tenants_workspace(
    database: Database, alice: Principal, mallory: Principal, tools: ToolRegistry
) -> None:
    victim = await context_for(database, alice, "ws")
    await call(tools, victim, "write_file", path="secret.txt", content="s")
    # mallory's context pointed at alice's session: RLS hides every row
    attacker = ToolContext(
        db=database,
        principal=mallory,
        session_id=victim.session_id,
        run_id=victim.run_id,
        settings=victim.settings,
    )
    r = await call(tools, attacker, "delete_file", path="secret.txt")
    assert not r.ok and "no such file" in (r.error or "")
    r = await call(tools, attacker, "read_file", path="secret.txt")
    assert not r.ok
    assert await content(victim, "secret.txt") == b"s"


# ---------------------------------------------------------------------------- binary files


async def test_binary_files_round_trip_through_base64(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, "ws")
    encoded = base64.b64encode(BLOB).decode()
    w = await call(tools, ctx, "write_file", path="img/x.bin", content=encoded, encoding="base64")
    assert w.ok and w.result["size"] == len(BLOB)
    assert w.result["sha256"] == hashlib.sha256(BLOB).hexdigest()
    assert await content(ctx, "img/x.bin") == BLOB  # stored as the bytes, not as text

    r = await call(tools, ctx, "read_file", path="img/x.bin")
    assert r.ok and r.result["encoding"] == "base64"
    assert base64.b64decode(r.result["content"]) == BLOB
    assert (r.result["bytes"], r.result["totalBytes"], r.result["truncated"]) == (
        len(BLOB),
        len(BLOB),
        False,
    )
    page = await call(tools, ctx, "read_file", path="img/x.bin", offset=10, limit=5)
    assert base64.b64decode(page.result["content"]) == BLOB[10:15] and page.result["truncated"]
    past = await call(tools, ctx, "read_file", path="img/x.bin", offset=len(BLOB) + 1)
    assert not past.ok and "past the end" in (past.error or "")

    text = await call(tools, ctx, "read_file", path="img/x.bin".replace("x.bin", "t.txt"))
    assert not text.ok  # missing
    await call(tools, ctx, "write_file", path="t.txt", content="héllo")
    r = await call(tools, ctx, "read_file", path="t.txt")
    assert r.result["encoding"] == "utf-8" and r.result["content"] == "héllo"
    b64_text = await call(tools, ctx, "write_file", path="u.txt", content="aGk=", encoding="base64")
    assert b64_text.ok and await content(ctx, "u.txt") == b"hi"


async def test_large_binary_reads_are_paged(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, "ws")
    big = b"\xff" * (READ_MAX_BYTES + 10)
    await Workspace.for_tool(ctx).write("big.bin", big)
    first = await call(tools, ctx, "read_file", path="big.bin")
    assert first.result["bytes"] == READ_MAX_BYTES and first.result["truncated"]
    assert len(first.result["content"]) <= 100_000
    rest = await call(tools, ctx, "read_file", path="big.bin", offset=READ_MAX_BYTES)
    assert base64.b64decode(rest.result["content"]) == b"\xff" * 10
    assert not rest.result["truncated"]


@pytest.mark.parametrize("bad", ["not base64!", "aGk", "aGk=\n=="])
async def test_invalid_base64_is_refused(
    database: Database, alice: Principal, tools: ToolRegistry, bad: str
) -> None:
    ctx = await context_for(database, alice, "ws")
    r = await call(tools, ctx, "write_file", path="x.bin", content=bad, encoding="base64")
    assert not r.ok and r.error == "content is not valid base64"
    r = await call(tools, ctx, "write_file", path="x.bin", content="x", encoding="latin-1")
    assert not r.ok and "invalid arguments for write_file" in (r.error or "")


async def test_base64_writes_respect_the_caps(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, "ws", workspace_max_file_bytes=4)
    r = await call(
        tools,
        ctx,
        "write_file",
        path="x.bin",
        content=base64.b64encode(b"12345").decode(),
        encoding="base64",
    )
    assert not r.ok and "5 bytes exceeds the per-file limit of 4 bytes" in (r.error or "")
