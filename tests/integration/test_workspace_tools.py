"""The workspace file tools against the real Postgres: persistence, paging, caps, isolation."""

from __future__ import annotations

from typing import Any

import pytest

from app.auth.principal import Principal
from app.config import Settings
from app.core.transcript import ToolCall, ToolResult
from app.db.engine import Database
from app.tools.base import ToolContext
from app.tools.registry import ToolRegistry, default_tool_registry
from app.tools.workspace import Workspace
from tests.integration.tool_support import context_for


@pytest.fixture
def tools() -> ToolRegistry:
    return default_tool_registry()


async def call(tools: ToolRegistry, ctx: ToolContext, name: str, **args: Any) -> ToolResult:
    return await tools.execute(ctx, ToolCall(id="c", name=name, args=args))


async def test_write_read_list(database: Database, alice: Principal, tools: ToolRegistry) -> None:
    ctx = await context_for(database, alice, "ws")
    wrote = await call(tools, ctx, "write_file", path="notes//todo.md", content="one\ntwo\n")
    assert wrote.ok and wrote.result["path"] == "notes/todo.md" and wrote.result["size"] == 8
    await call(tools, ctx, "write_file", path="b.txt", content="B")
    await call(tools, ctx, "write_file", path="notes/a/deep.txt", content="é")

    read = await call(tools, ctx, "read_file", path="notes/todo.md")
    assert read.ok and read.result["content"] == "one\ntwo\n"
    assert read.result["totalLines"] == 2 and not read.result["truncated"]

    everything = await call(tools, ctx, "list_files")
    assert everything.ok
    assert everything.result["files"] == [
        {"path": "b.txt", "size": 1},
        {"path": "notes/a/deep.txt", "size": 2},
        {"path": "notes/todo.md", "size": 8},
    ]
    notes = await call(tools, ctx, "list_files", path="notes/")
    assert [f["path"] for f in notes.result["files"]] == ["notes/a/deep.txt", "notes/todo.md"]
    assert (await call(tools, ctx, "list_files", path="nothing")).result["files"] == []

    again = await call(tools, ctx, "write_file", path="b.txt", content="BB")
    assert again.ok
    assert (await call(tools, ctx, "read_file", path="b.txt")).result["content"] == "BB"


async def test_read_pages_by_lines(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, "ws")
    await call(tools, ctx, "write_file", path="f", content="".join(f"l{i}\n" for i in range(10)))
    page = await call(tools, ctx, "read_file", path="f", offset=3, limit=2)
    assert page.result["content"] == "l3\nl4\n"
    assert page.result["lines"] == 2 and page.result["truncated"]
    tail = await call(tools, ctx, "read_file", path="f", offset=8)
    assert tail.result["content"] == "l8\nl9\n" and not tail.result["truncated"]
    past = await call(tools, ctx, "read_file", path="f", offset=10)
    assert not past.ok and "past the end" in (past.error or "")


async def test_failures_are_fed_back(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, "ws")
    await call(tools, ctx, "write_file", path="dir/file", content="x")
    cases = [
        ("read_file", {"path": "missing.txt"}, "no such file: missing.txt"),
        ("read_file", {"path": "dir"}, "dir is a directory"),
        ("list_files", {"path": "dir/file"}, "dir/file is a file"),
        ("write_file", {"path": "dir", "content": ""}, "cannot write dir: it is a directory"),
        ("write_file", {"path": "dir/file/x", "content": ""}, "dir/file is a file"),
        ("write_file", {"path": "../escape", "content": ""}, "'..'"),
        ("read_file", {"path": "/etc/passwd"}, "absolute"),
        ("list_files", {"path": "~"}, "'~'"),
    ]
    for name, args, fragment in cases:
        result = await call(tools, ctx, name, **args)
        assert not result.ok and fragment in (result.error or ""), (name, args, result.error)


async def test_binary_content_is_not_read_as_text(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, "ws")
    await Workspace.for_tool(ctx).write("blob.bin", b"\xff\xfe\x00")
    result = await call(tools, ctx, "read_file", path="blob.bin")
    # Not decoded as text: returned as base64 (see test_file_tools_more.py for the details).
    assert result.ok and result.result["encoding"] == "base64"
    assert result.result["content"] == "//4A"


async def test_size_caps(database: Database, alice: Principal, tools: ToolRegistry) -> None:
    ctx = await context_for(
        database, alice, "ws", workspace_max_file_bytes=10, workspace_max_total_bytes=25
    )
    too_big = await call(tools, ctx, "write_file", path="big", content="x" * 11)
    assert not too_big.ok and "per-file limit of 10 bytes" in (too_big.error or "")
    assert (await call(tools, ctx, "write_file", path="a", content="x" * 10)).ok
    assert (await call(tools, ctx, "write_file", path="b", content="x" * 10)).ok
    over = await call(tools, ctx, "write_file", path="c", content="x" * 6)
    assert not over.ok and "workspace limit of 25 bytes" in (over.error or "")
    # replacing a file counts its new size, not old + new
    assert (await call(tools, ctx, "write_file", path="b", content="x" * 9)).ok


async def test_like_wildcards_in_folder_names_are_literal(
    database: Database, alice: Principal, tools: ToolRegistry
) -> None:
    ctx = await context_for(database, alice, "ws")
    await call(tools, ctx, "write_file", path="a_b/x", content="")
    await call(tools, ctx, "write_file", path="aXb/y", content="")
    await call(tools, ctx, "write_file", path="100%/z", content="")
    listed = await call(tools, ctx, "list_files", path="a_b")
    assert [f["path"] for f in listed.result["files"]] == ["a_b/x"]
    listed = await call(tools, ctx, "list_files", path="100%")
    assert [f["path"] for f in listed.result["files"]] == ["100%/z"]


async def test_workspaces_are_per_session_and_per_tenant(
    database: Database, alice: Principal, mallory: Principal, tools: ToolRegistry
) -> None:
    mine = await context_for(database, alice, "ws")
    other_session = await context_for(database, alice, "other")
    await call(tools, mine, "write_file", path="secret.txt", content="s3cret")

    assert (await call(tools, other_session, "list_files")).result["files"] == []
    # mallory aiming at alice's session id: RLS hides the rows and refuses writes
    intruder = ToolContext(
        db=database,
        principal=mallory,
        session_id=mine.session_id,
        run_id=mine.run_id,
        settings=Settings(),
    )
    read = await call(tools, intruder, "read_file", path="secret.txt")
    assert not read.ok and read.error == "no such file: secret.txt"
    assert (await call(tools, intruder, "list_files")).result["files"] == []
    wrote = await call(tools, intruder, "write_file", path="secret.txt", content="pwned")
    assert not wrote.ok and "not accessible" in (wrote.error or "")
    assert (await call(tools, mine, "read_file", path="secret.txt")).result["content"] == "s3cret"
