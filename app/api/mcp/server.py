"""The MCP server's tools: run an agent, read a run's status, a session's history, the agents.

Each tool acts as its caller (`app.api.mcp.caller`) through the same functions the REST routes
use, so the same rules hold: RLS by tenant (another tenant's run or session is "not found",
exactly like an unknown one), members' private sessions, quotas, audit. Tool failures are
results with `isError` and a message saying what was wrong (the caller's model reads it).
"""

from __future__ import annotations

import logging
from typing import Annotated
from uuid import UUID

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field

from app.agents import store as agent_store
from app.api.errors import ApiError
from app.api.mcp.caller import caller_of
from app.api.mcp.run_agent import run_agent as _run_agent
from app.api.mcp.schemas import (
    AgentListOutput,
    AgentSummary,
    RunAgentOutput,
    SessionHistoryOutput,
)
from app.api.routes.runs import run_status as _rest_run_status
from app.api.schemas import MAX_MESSAGE_CHARS, SESSION_KEY_PATTERN, RunStatus
from app.sessions.store import get_session_by_key, list_messages
from app.tools.sessions_tools import compact

INSTRUCTIONS = """\
Runs this deployment's agents for you. `run_agent` sends a message to an agent and waits for its
answer (a new chat unless you pass the `sessionKey` of an earlier answer); `run_status` and
`session_history` read runs and chats back; `list_agents` names the agents you may choose.
"""

HISTORY_DEFAULT = 20
HISTORY_MAX = 100
_UNSEEN = "(another tenant's, another user's private one, or unknown)"

SessionKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        pattern=SESSION_KEY_PATTERN,
        description="A session key (from an earlier `run_agent`).",
    ),
]


async def run_agent(
    message: Annotated[
        str,
        Field(
            min_length=1,
            max_length=MAX_MESSAGE_CHARS,
            description="What to ask the agent (the user's message).",
        ),
    ],
    ctx: Context,
    sessionKey: Annotated[  # camelCase: the wire name, as in the REST API
        str | None,
        Field(
            min_length=1,
            max_length=200,
            pattern=SESSION_KEY_PATTERN,
            description="Continue this chat (the `sessionKey` of an earlier answer); omitted: a "
            "new chat. Any other key of yours starts a chat under that key.",
        ),
    ] = None,
    agentId: Annotated[
        UUID | None,
        Field(
            description="The agent to ask (from `list_agents`); omitted: the chat's agent, or "
            "the tenant's default agent for a new chat."
        ),
    ] = None,
) -> Annotated[CallToolResult, RunAgentOutput]:
    """Send a message to an agent and wait for its final answer (the text content; the
    structured content adds `runId`, `sessionKey`, `status` and token `usage`). MCP progress
    notifications report what the run does meanwhile (state changes, tool calls, writing).
    A failed or cancelled run is an error result saying why. The wait is bounded: a run still
    going then is an error result with its `runId` (read it later with `run_status`).
    Cancelling this request cancels the run."""
    return await _run_agent(caller_of(ctx), ctx, message, sessionKey, agentId)


async def run_status(
    runId: Annotated[UUID, Field(description="The run's id (`runId` of `run_agent`).")],
    ctx: Context,
) -> RunStatus:
    """A run's status (`queued`, `running`, `waiting`, `awaiting_approval`, `completed`,
    `failed`, `cancelled`), timestamps, final answer (`result.text`) or `error`, token usage,
    attempts, context size and sub-agents."""
    caller = caller_of(ctx)
    runtime = caller.runtime
    try:
        return await _rest_run_status(caller.principal, runtime.db, runtime.queue, runId)
    except ApiError as exc:  # 404: unknown, or not the caller's to see
        raise ToolError(f"run {runId} not found {_UNSEEN}") from exc


async def session_history(
    sessionKey: SessionKey,
    ctx: Context,
    limit: Annotated[
        int,
        Field(ge=1, le=HISTORY_MAX, description="At most this many of the latest messages."),
    ] = HISTORY_DEFAULT,
) -> SessionHistoryOutput:
    """The latest messages of a chat, oldest first: user and assistant texts, the assistant's
    tool calls (name and arguments) and tool results, long texts cut."""
    caller = caller_of(ctx)
    async with caller.runtime.db.tenant(caller.principal) as s:
        found = await get_session_by_key(s, sessionKey)
        if found is None:
            raise ToolError(f"session {sessionKey!r} not found {_UNSEEN}")
        after = max(0, found.message_count - limit)
        rows = await list_messages(s, found.id, after_seq=after, limit=limit)
    return SessionHistoryOutput(
        session_key=found.session_key,
        message_count=found.message_count,
        messages=[compact(row.seq, row.payload) for row in rows],
        truncated=after > 0,
    )


async def list_agents(ctx: Context) -> AgentListOutput:
    """The agents of your tenant (`agentId` for `run_agent`), the default agent first."""
    caller = caller_of(ctx)
    settings = caller.runtime.settings
    async with caller.runtime.db.tenant(caller.principal) as s:
        await agent_store.default_agent(
            s,
            caller.principal,
            model=settings.default_model,
            max_turns=min(settings.max_turns, 100),
        )
        agents = await agent_store.list_agents(s)
    return AgentListOutput(
        agents=[
            AgentSummary(agent_id=a.id, name=a.name, model=a.model, is_default=a.is_default)
            for a in agents
        ]
    )


def build_server(version: str) -> MCPServer:
    """The MCP server with the runtime's tools (transport and auth: `app.api.mcp.endpoint`)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        server: MCPServer = MCPServer("agent-runtime", version=version, instructions=INSTRUCTIONS)
    finally:  # it calls logging.basicConfig (when nothing is configured yet); ours owns logging
        root.handlers[:] = handlers
        root.setLevel(level)
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    runs = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True)
    for tool, title, hints in (
        (run_agent, "Run an agent", runs),
        (run_status, "Read a run's status", reads),
        (session_history, "Read a chat's messages", reads),
        (list_agents, "List the agents", reads),
    ):
        description = " ".join((tool.__doc__ or "").split())  # one paragraph, no indentation
        server.add_tool(tool, title=title, description=description, annotations=hints)
    return server
