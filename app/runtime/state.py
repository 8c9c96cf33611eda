"""The state one run's phases share, and what can be read off its stored transcript.

Everything the loop decides is derived from the transcript as stored (plus what this attempt
appended), so a resumed attempt and a fresh one go through the same code: pending tool calls are
the latest assistant message's calls without a stored result, and a stored final assistant
message means the run only has to be finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from app.config import Settings
from app.llm.base import Message, Model
from app.queue.lease import LeasedRun, StoredMessage
from app.runtime.messages import AssistantMessage, ToolCall, ToolResult
from app.tools.registry import ToolRegistry


class RunFailed(Exception):
    """The run cannot complete; it is finished `failed` with this code and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def as_error(self) -> dict[str, Any]:
        """The run's stored `error`."""
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """The agent settings the loop uses (from the `agents` row)."""

    model: str
    system_prompt: str
    max_turns: int


@dataclass(frozen=True, slots=True)
class Entry:
    """A transcript entry and the run that wrote it (None: imported/older rows)."""

    run_id: UUID | None
    message: Message

    @classmethod
    def stored(cls, row: StoredMessage) -> Entry:
        """An entry from a stored transcript row."""
        return cls(run_id=row.run_id, message=row.message)


@dataclass(slots=True)
class RunState:
    """One attempt at one run: who, with what, and the transcript so far."""

    leased: LeasedRun
    settings: Settings
    agent: AgentConfig
    tools: ToolRegistry
    transcript: list[Entry] = field(default_factory=list)
    model: Model | None = None

    @property
    def run_id(self) -> UUID:
        """The run's id."""
        return self.leased.run.id

    def own(self) -> list[Message]:
        """This run's messages, in order."""
        return [e.message for e in self.transcript if e.run_id == self.run_id]

    def record(self, message: Message) -> None:
        """Remember a message this attempt has just stored."""
        self.transcript.append(Entry(run_id=self.run_id, message=message))

    def turns_used(self) -> int:
        """Model turns this run has completed (stored assistant messages, all attempts)."""
        return sum(isinstance(m, AssistantMessage) for m in self.own())

    def pending_tool_calls(self) -> list[ToolCall]:
        """Calls of the run's latest assistant message that have no stored result yet."""
        own = self.own()
        latest = next((m for m in reversed(own) if isinstance(m, AssistantMessage)), None)
        if latest is None:
            return []
        done = {m.tool_call_id for m in own if isinstance(m, ToolResult)}
        return [c for c in latest.tool_calls if c.id not in done]

    def final_answer(self) -> str | None:
        """The text of the run's stored final answer (an assistant message without calls)."""
        own = self.own()
        if own and isinstance(own[-1], AssistantMessage) and not own[-1].tool_calls:
            return own[-1].text
        return None

    def tool_call_ids(self) -> set[str]:
        """Every tool call id this run has used (ids are unique per run)."""
        return {c.id for m in self.own() if isinstance(m, AssistantMessage) for c in m.tool_calls}
