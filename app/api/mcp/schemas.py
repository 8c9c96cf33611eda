"""What the MCP tools return as structured content (camelCase, like the REST API), and the helper
that pairs it with the text a model reads."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from mcp_types import CallToolResult, TextContent
from pydantic import Field

from app.api.schemas import ApiModel, RunError, RunStatusName, Usage


class RunAgentOutput(ApiModel):
    """The outcome of `run_agent`: the run, its session, and its final answer or error."""

    run_id: UUID = Field(description="The run (`run_status` reads it again).")
    session_key: str = Field(description="The session: pass it again to continue the chat.")
    status: RunStatusName = Field(
        description="`completed`; `failed` or `cancelled` (an error result); `queued`, `running`, "
        "`waiting` or `awaiting_approval` when the wait ended before the run did."
    )
    text: str | None = Field(default=None, description="The agent's final answer (completed).")
    error: RunError | None = Field(default=None, description="Why it failed.")
    usage: Usage


class SessionHistoryOutput(ApiModel):
    """The latest messages of a session, oldest first."""

    session_key: str
    message_count: int = Field(description="All messages of the session.")
    messages: list[dict[str, Any]] = Field(
        description="`{seq, role: user|assistant|tool, text?, toolCalls?: [{name, args}], name?, "
        "ok?, result?, error?}`; long texts are cut."
    )
    truncated: bool = Field(description="Older messages were left out.")


class AgentSummary(ApiModel):
    """One of the tenant's agents."""

    agent_id: UUID
    name: str
    model: str
    is_default: bool


class AgentListOutput(ApiModel):
    """The tenant's agents, the default one first."""

    agents: list[AgentSummary]


def tool_result(model: ApiModel, text: str, *, is_error: bool = False) -> CallToolResult:
    """`model` as structured content (its wire JSON) beside `text` for the model to read."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=model.model_dump(mode="json", by_alias=True),
        is_error=is_error,
    )
