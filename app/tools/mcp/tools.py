"""An MCP server's tools as our `Tool`s: names, schemas, risk, and results the model can read.

* Name: `mcp__<server>__<tool>`, the tool's name with every character outside `[A-Za-z0-9_-]`
  replaced by `_`, at most 64 characters (what model APIs accept); a longer one is cut and ends
  in 8 hex digits of a hash of the full name. Two tools of a server that end up with the same
  name are both left out, and listed as unavailable.
* Risk: the server's `toolRisk[tool]`, else its `risk`, else from the tool's annotations:
  `readOnlyHint` → low, `destructiveHint: true` → high, anything else → medium.
* Idempotent (may be re-run after a worker died mid-call): `readOnlyHint` or `idempotentHint`.
* Result: the text blocks joined (`text`), `structuredContent` as `structured`, and a short
  description of each image, audio or resource block (`attachments`); `isError` results raise
  `ToolError` with their text, which the model reads.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types

from app.tools.base import Tool, ToolContext, ToolError
from app.tools.mcp.config import Risk, ServerConfig
from app.tools.sources import Unavailable

MAX_NAME = 64
MAX_RESULT_CHARS = 50_000
"""Text of one result kept for the model (the rest is cut, with a marker)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")

Caller = Callable[[str, dict[str, Any]], Awaitable[types.CallToolResult]]
"""Calls a tool of the server by its own name (the connection pool's `call`)."""


def tool_name(server: str, tool: str) -> str:
    """The name the model sees for `server`'s tool `tool` (see the module docstring)."""
    full = f"mcp__{server}__{_UNSAFE.sub('_', tool) or '_'}"
    if len(full) <= MAX_NAME:
        return full
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    return f"{full[: MAX_NAME - 9]}_{digest}"


def tool_risk(config: ServerConfig, tool: types.Tool) -> Risk:
    """The risk level approvals see for `tool` (see the module docstring)."""
    if tool.name in config.tool_risk:
        return config.tool_risk[tool.name]
    if config.risk is not None:
        return config.risk
    hints = tool.annotations
    if hints is not None and hints.read_only_hint:
        return "low"
    if hints is not None and hints.destructive_hint:
        return "high"
    return "medium"


def parameters_of(tool: types.Tool) -> dict[str, Any]:
    """The tool's input schema as an arguments-object schema (`type: object` ensured)."""
    schema = dict(tool.input_schema or {})
    schema.pop("$schema", None)  # validated as Draft 2020-12 like ours; drafts differ little here
    if schema.get("type") != "object":
        schema["type"] = "object"
    return schema


class McpTool(Tool):
    """One tool of a tenant's MCP server; `run` calls it through the server's connection."""

    group = "mcp"

    def __init__(
        self, config: ServerConfig, tool: types.Tool, call: Caller, timeout: float
    ) -> None:
        self.name = tool_name(config.name, tool.name)
        self.remote_name = tool.name
        self.description = (tool.description or tool.title or tool.name).strip()
        self.parameters = parameters_of(tool)
        hints = tool.annotations
        self.idempotent = hints is not None and bool(hints.read_only_hint or hints.idempotent_hint)
        self.risk = tool_risk(config, tool)
        self.origin = config.origin
        self.timeout_seconds = config.timeout_seconds or timeout
        self._call = call

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """Call the tool on its server (the registry enforces `timeout_seconds`; cancelling the
        run cancels the request on the server too)."""
        return result_of(await self._call(self.remote_name, args))


def server_tools(
    config: ServerConfig, listed: list[types.Tool], call: Caller, timeout: float
) -> tuple[list[Tool], list[Unavailable]]:
    """`listed` as `McpTool`s; tools whose names collide once made safe are left out."""
    tools = [McpTool(config, tool, call, timeout) for tool in listed]
    by_name: dict[str, list[McpTool]] = {}
    for tool in tools:
        by_name.setdefault(tool.name, []).append(tool)
    kept: list[Tool] = [group[0] for group in by_name.values() if len(group) == 1]
    clashes = [
        Unavailable(
            config.origin,
            name,
            "the server's tools "
            + ", ".join(repr(t.remote_name) for t in group)
            + f" would all be called {name}",
        )
        for name, group in by_name.items()
        if len(group) > 1
    ]
    return kept, clashes


def result_of(result: types.CallToolResult) -> dict[str, Any]:
    """A call's result as JSON for the model; `ToolError` when the server reports an error."""
    texts: list[str] = []
    attachments: list[dict[str, Any]] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            texts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            size = len(block.data) * 3 // 4
            attachments.append({"type": block.type, "mimeType": block.mime_type, "bytes": size})
        elif isinstance(block, types.ResourceLink):
            attachments.append({"type": "resource_link", "uri": str(block.uri), "name": block.name})
        elif isinstance(block, types.EmbeddedResource):
            attachments.append(_resource(block.resource))
        else:
            attachments.append({"type": getattr(block, "type", "unknown")})
    text = _capped("\n".join(texts))
    if result.is_error:
        raise ToolError(text or "the MCP server reported an error without a message")
    out: dict[str, Any] = {}
    if texts:
        out["text"] = text
    if result.structured_content is not None:
        out["structured"] = result.structured_content
    if attachments:
        out["attachments"] = attachments
    return out


def _resource(resource: types.TextResourceContents | types.BlobResourceContents) -> dict[str, Any]:
    shown: dict[str, Any] = {"type": "resource", "uri": str(resource.uri)}
    if resource.mime_type:
        shown["mimeType"] = resource.mime_type
    if isinstance(resource, types.TextResourceContents):
        shown["text"] = _capped(resource.text)
    else:
        shown["bytes"] = len(resource.blob) * 3 // 4
    return shown


def _capped(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return text[:MAX_RESULT_CHARS] + f"\n…[truncated {len(text) - MAX_RESULT_CHARS} chars]"
