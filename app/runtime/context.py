"""Context building: which messages the model sees on each turn.

For now the whole session transcript. Later issues add compaction (summaries from
`agent_context_snapshots` replacing old ranges) here, without touching the loop.

One repair is made on the way: a tool call that never got a result (its run was cancelled or
failed mid-tool) gets a synthetic failed result right after its turn, because providers reject
tool calls without results. Nothing is stored; the transcript stays as it happened.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.llm.base import Message
from app.runtime.messages import AssistantMessage, ToolCall, ToolResult
from app.runtime.state import Entry

MISSING_RESULT = "no result was recorded for this call (its run ended before the tool finished)"


def build_context(transcript: Sequence[Entry]) -> list[Message]:
    """The messages for the next model call, oldest first."""
    context: list[Message] = []
    open_calls: list[ToolCall] = []
    for entry in transcript:
        message = entry.message
        if isinstance(message, ToolResult):
            open_calls = [c for c in open_calls if c.id != message.tool_call_id]
        else:
            context.extend(_missing_results(open_calls))
            open_calls = list(message.tool_calls) if isinstance(message, AssistantMessage) else []
        context.append(message)
    context.extend(_missing_results(open_calls))
    return context


def _missing_results(calls: Sequence[ToolCall]) -> list[Message]:
    return [
        ToolResult(tool_call_id=c.id, name=c.name, ok=False, error=MISSING_RESULT) for c in calls
    ]
