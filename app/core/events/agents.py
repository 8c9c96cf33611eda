"""Many agents, one conversation: sub-agents spawned and ended, messages injected into a running
run (a user's steering message, a child's outcome, a reply), and a run interrupted by a new one.
See docs/multi-agent.md."""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

from pydantic import Field

from app.core.events.base import EventBase, EventError, unset
from app.core.events.names import (
    MESSAGE_INJECTED,
    RUN_INTERRUPTED,
    SUBAGENT_COMPLETED,
    SUBAGENT_SPAWNED,
)

SubagentOutcome = Literal["completed", "failed", "cancelled", "timed_out"]
"""How a child run ended (`timed_out`: it failed with `run_timeout`)."""


class SubagentSpawnedEvent(EventBase):
    """The run spawned a sub-agent (`sessions_spawn`): a child run in a session of its own."""

    type: Literal["subagent.spawned"] = SUBAGENT_SPAWNED
    child_run_id: UUID
    """The child's run (`GET /runs/{childRunId}/...`)."""
    child_session_key: str
    """The child's session: `<parentSessionKey>:sub:<short id>`."""
    task: str
    """What the child was asked to do (its user message)."""
    label: str | None = Field(default=None, exclude_if=unset)
    """The spawner's name for the child (omitted when unset)."""
    agent_id: UUID
    """The agent the child runs."""


class SubagentCompletedEvent(EventBase):
    """A child run ended; its outcome was handed to this run (or, if this run had ended, to the
    follow-up run this event belongs to). Written in the transaction that finished the child."""

    type: Literal["subagent.completed"] = SUBAGENT_COMPLETED
    child_run_id: UUID
    """The child's run."""
    child_session_key: str | None = Field(default=None, exclude_if=unset)
    """The child's session (omitted when unknown)."""
    label: str | None = Field(default=None, exclude_if=unset)
    """The spawner's name for the child (omitted when unset)."""
    status: SubagentOutcome
    """`completed`, `failed`, `cancelled` or `timed_out`."""
    result: dict[str, Any] | None = Field(default=None, exclude_if=unset)
    """`{text}`: the child's final answer (when completed; omitted otherwise)."""
    error: EventError | None = Field(default=None, exclude_if=unset)
    """Why it did not complete (omitted when completed)."""


InjectedSource = Literal["user", "subagent", "agent"]
"""Who a message injected into a running run is from: the user (`ifBusy=steer`), a sub-agent
(its outcome) or another session's agent (a reply to `sessions_send`)."""


class MessageInjectedEvent(EventBase):
    """A message was added to the running run's transcript at a model boundary (the next model
    call reads it)."""

    type: Literal["message.injected"] = MESSAGE_INJECTED
    source: InjectedSource
    """Who it is from: `user`, `subagent` or `agent`."""
    text: str
    """The message as the model reads it."""
    inbox_id: int
    """The message's `run_inbox` row (each is injected once)."""
    from_run_id: UUID | None = Field(default=None, exclude_if=unset)
    """The child or replying run (omitted for a user's message)."""
    skipped_calls: int = Field(default=0, exclude_if=lambda v: v == 0)
    """Tool calls of the current turn not started because of this message: each got the stored
    result "skipped: new message" (omitted when none)."""


class RunInterruptedEvent(EventBase):
    """A new message with `ifBusy=interrupt` stopped this run; `run.cancelled` follows."""

    type: Literal["run.interrupted"] = RUN_INTERRUPTED
    by_run_id: UUID
    """The run that takes its place in the lane."""
