"""The state one run's phases share (`RunState`), what can be read off its stored transcript, and
the recording of the loop's state machine (`record_transition`).

Everything the loop decides is derived from the transcript as stored (plus what this attempt
appended), so a resumed attempt and a fresh one go through the same code: pending tool calls are
the latest assistant message's calls without a stored result, and a stored final assistant
message means the run only has to be finished. (Plan mode derives its progress the same way, in
`app.runtime.plan_protocol`.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from app.config import Settings
from app.core.events import StateChangedEvent
from app.core.state_machine import QUEUED, check_transition
from app.core.tokens import estimate_message_tokens
from app.core.transcript import AssistantMessage, Message, ToolCall, ToolResult
from app.llm.base import Model
from app.llm.chain import ModelChain
from app.queue.lease import FencedWrite, LeasedRun, RowWrites
from app.runtime.agent_settings import AgentMode
from app.runtime.context import Summary
from app.runtime.statements import SET_STATE
from app.runtime.transcript_store import Entry
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
    """The agent settings the loop uses (from the `agents` row and its `settings`)."""

    model: str
    system_prompt: str
    max_turns: int
    """Model turns per run (chat mode) or per step (plan mode)."""
    mode: AgentMode = "chat"
    timeout_seconds: float = 600.0
    """Wall-clock limit of the run, counted from its first start."""
    token_budget: int | None = None
    """Most input + output tokens the run may use (None: unlimited)."""
    context_window: int | None = None
    """The agent's own context window setting (None: the model's, else the server's)."""
    fallback_models: tuple[str, ...] = ()
    """Models tried in order when `model` fails in a way another can fix (`model_fallback`)."""


@dataclass(frozen=True, slots=True)
class ContextWindow:
    """The run's model's context window, and the part of it kept free for the answer."""

    window: int
    reserve: int

    @property
    def budget(self) -> int:
        """Most tokens a call's input may take before the context is compacted."""
        return self.window - self.reserve

    @classmethod
    def of(cls, window: int, reserve: int) -> ContextWindow:
        """`window` with `reserve` capped at a quarter of it."""
        return cls(window=window, reserve=min(reserve, window // 4))


@dataclass(slots=True)
class RunState:
    """One attempt at one run: who, with what, and the transcript so far."""

    leased: LeasedRun
    settings: Settings
    agent: AgentConfig
    tools: ToolRegistry
    transcript: list[Entry] = field(default_factory=list)
    model: Model | None = None
    """The model the run's calls go to: the agent's, or a fallback after it failed."""
    chain: ModelChain | None = None
    """The agent's model and fallbacks, and which of them is in use (set with `model`)."""
    current: str = QUEUED
    """The state machine's state (`app.core.state_machine`); every attempt starts `queued`."""
    tokens_used: int = 0
    """Input + output tokens of the run so far (all attempts)."""
    deadline: float | None = None
    """When the run times out, in `loop.time()` terms (set by `prepare_run`)."""
    hard_deadline: bool = False
    """The deadline is the run's own `deadline_at` (a sub-agent's), not the agent's timeout."""
    window: ContextWindow = ContextWindow(window=128_000, reserve=8192)
    """The context window the run's calls must fit (set by `prepare_run`)."""
    summary: Summary | None = None
    """The session's latest compaction summary: it replaces the rows it covers in contexts."""
    token_ratio: float = 1.0
    """Provider-reported input tokens per estimated token, from the latest model call."""
    compaction_failed: bool = False
    """A compaction of this attempt failed: no more tries (the run goes on while it fits)."""
    flushed_through: int = 0
    """Transcript rows up to this seq were already offered for a memory flush."""
    skipped_calls: int = 0
    """Tool calls this attempt skipped for a user's steering message, not yet told of."""
    budget_checked: bool = False
    """The tenant's token quota was checked for the next model call already (preparation)."""

    @property
    def run_id(self) -> UUID:
        """The run's id."""
        return self.leased.run.id

    def own(self) -> list[Message]:
        """This run's messages, in order."""
        return [e.message for e in self.transcript if e.run_id == self.run_id]

    def record(self, message: Message) -> None:
        """Remember a message this attempt has just stored (as the session's next row)."""
        seq = self.transcript[-1].seq + 1 if self.transcript else 1
        tokens = estimate_message_tokens(message)
        self.transcript.append(Entry(self.run_id, message, seq=seq, tokens=tokens))

    async def transition(self, to: str) -> None:
        """Move the state machine to `to` (recorded and streamed); staying put is a no-op."""
        if to != self.current:
            await record_transition(self.leased, self.current, to)
            self.current = to

    def turns_used(self, since: int = 0) -> int:
        """Model turns stored by this run (all attempts) from position `since` of `own()` on.

        Plans are not turns: they are bounded by the plan protocol, not by `max_turns`.
        """
        return sum(isinstance(m, AssistantMessage) and m.plan is None for m in self.own()[since:])

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
        last = own[-1] if own else None
        if isinstance(last, AssistantMessage) and not last.tool_calls and last.plan is None:
            return last.text
        return None

    def tool_call_ids(self) -> set[str]:
        """Every tool call id this run has used (ids are unique per run)."""
        return {c.id for m in self.own() if isinstance(m, AssistantMessage) for c in m.tool_calls}


async def record_transition(leased: LeasedRun, current: str, to: str) -> None:
    """Check `current → to`, then set the run's `state` and store `state.changed` atomically,
    with the run's next write (deferred: `LeasedRun.defer`)."""
    check_transition(current, to)
    leased.defer(
        [StateChangedEvent(from_=current, to=to)], _set_state(leased, to), replaces="state"
    )


async def set_loop_state(leased: LeasedRun, state: str | None) -> None:
    """Record the loop's current state (shown in /status) now, without an event or a check."""
    async with leased.write() as w:
        await _set_state(leased, state)(w)


def _set_state(leased: LeasedRun, state: str | None) -> RowWrites:
    async def rows(w: FencedWrite) -> None:
        await w.session.execute(SET_STATE, {"state": state, "run_id": leased.run.id})

    return rows
