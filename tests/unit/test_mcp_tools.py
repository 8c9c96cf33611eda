"""An MCP server's tools as ours: safe names within 64 characters, collisions left out, risk from
configuration or annotations, results the model can read, errors as ToolError."""

from __future__ import annotations

import re
from typing import Any

import mcp_types as types
import pytest

from app.tools.base import ToolError
from app.tools.mcp.config import ServerConfig, name_problem
from app.tools.mcp.tools import parameters_of, result_of, server_tools, tool_name, tool_risk

SAFE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def config(**fields: Any) -> ServerConfig:
    return ServerConfig(tenant_id="acme", name="gh", transport="http", version=1, **fields)


def tool(name: str, **fields: Any) -> types.Tool:
    return types.Tool(name=name, input_schema={"type": "object"}, **fields)


async def never(name: str, args: dict[str, Any]) -> types.CallToolResult:
    raise AssertionError("not called")


def test_names_are_namespaced_made_safe_and_capped() -> None:
    assert tool_name("gh", "create_issue") == "mcp__gh__create_issue"
    assert tool_name("gh", "repo.list files/ü") == "mcp__gh__repo_list_files__"
    long = tool_name("gh", "x" * 100)
    assert len(long) == 64 and SAFE.match(long) and long != tool_name("gh", "x" * 99)
    for raw in ("", "a" * 300, "über/ünder", "a b"):
        assert SAFE.match(tool_name("server-name_1", raw))


def test_server_names_cannot_be_ambiguous() -> None:
    assert name_problem("github") is None and name_problem("my-srv_2") is None
    for bad in ("GitHub", "a__b", "_a", "1a", "", "a" * 33, "a.b"):
        assert name_problem(bad) is not None, bad


def test_colliding_names_are_left_out_and_explained() -> None:
    kept, clashes = server_tools(config(), [tool("a.b"), tool("a_b"), tool("c")], never, 60)
    assert [t.name for t in kept] == ["mcp__gh__c"]
    [clash] = clashes
    assert (clash.source, clash.pattern) == ("mcp:gh", "mcp__gh__a_b")
    assert "'a.b'" in clash.reason and "'a_b'" in clash.reason


@pytest.mark.parametrize(
    ("fields", "hints", "risk"),
    [
        ({}, None, "medium"),
        ({}, types.ToolAnnotations(read_only_hint=True), "low"),
        ({}, types.ToolAnnotations(destructive_hint=True), "high"),
        ({"risk": "low"}, types.ToolAnnotations(destructive_hint=True), "low"),
        ({"risk": "low", "tool_risk": {"t": "high"}}, None, "high"),
    ],
)
def test_risk_comes_from_configuration_then_annotations(
    fields: dict[str, Any], hints: types.ToolAnnotations | None, risk: str
) -> None:
    assert tool_risk(config(**fields), tool("t", annotations=hints)) == risk


def test_parameters_are_an_object_schema() -> None:
    raw = types.Tool(
        name="t",
        input_schema={"$schema": "http://json-schema.org/draft-07/schema#", "properties": {}},
    )
    assert parameters_of(raw) == {"type": "object", "properties": {}}


def test_results_join_text_keep_structure_and_summarise_the_rest() -> None:
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="one"),
            types.TextContent(type="text", text="two"),
            types.ImageContent(type="image", data="AAAA", mime_type="image/png"),
            types.ResourceLink(type="resource_link", uri="https://x.test/a", name="a"),
        ],
        structured_content={"n": 2},
    )
    assert result_of(result) == {
        "text": "one\ntwo",
        "structured": {"n": 2},
        "attachments": [
            {"type": "image", "mimeType": "image/png", "bytes": 3},
            {"type": "resource_link", "uri": "https://x.test/a", "name": "a"},
        ],
    }
    huge = types.CallToolResult(content=[types.TextContent(type="text", text="x" * 60_000)])
    assert result_of(huge)["text"].endswith("…[truncated 10000 chars]")


def test_an_error_result_is_a_tool_error_with_its_text() -> None:
    failed = types.CallToolResult(
        content=[types.TextContent(type="text", text="no such repo")], is_error=True
    )
    with pytest.raises(ToolError, match="^no such repo$"):
        result_of(failed)
    with pytest.raises(ToolError, match="without a message"):
        result_of(types.CallToolResult(content=[], is_error=True))
