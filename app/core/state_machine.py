"""Run statuses and the loop's state machine: the names, and the transitions allowed between them.

A run's `status` (`agent_run_queue.status`) is one of `RUN_STATUSES`. While a run is `running`,
`agent_run_queue.state` says what its loop is doing (`/status` shows it). Every change goes
through `app.runtime.run_state.record_transition`, which updates the column and stores a
`state.changed` event `{from, to}` in one fenced transaction, so the column and the event stream
never disagree. `TRANSITIONS` is the only list of allowed moves; anything else is a bug and raises
`InvalidTransitionError`.

Each attempt starts in `queued` (fresh and resumed runs alike were claimed from the queue), so a
resumed attempt's first event is e.g. `queued → tool_calling` when calls were left pending.
`completed` and `failed` are recorded by the loop just before it finishes the run (finishing
clears the column); `cancelled` belongs to whoever finishes a cancelled run (the worker).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

RunStatus = Literal[
    "queued", "running", "awaiting_approval", "waiting", "completed", "failed", "cancelled"
]
"""Where a run is in its life (`agent_run_queue.status`). `waiting`: parked until a sub-agent or a
reply it waits for arrives (`sessions_wait`, `sessions_send` with `waitForReply`)."""
RUN_STATUSES: Final[tuple[RunStatus, ...]] = (
    "queued",
    "running",
    "awaiting_approval",
    "waiting",
    "completed",
    "failed",
    "cancelled",
)
TERMINAL_STATUSES: Final = frozenset({"completed", "failed", "cancelled"})
"""Statuses a run never leaves."""

QUEUED: Final = "queued"
"""Waiting for a worker (and where every attempt starts)."""
PLANNING: Final = "planning"
"""Plan mode: asking the model for a plan or a revised plan."""
THINKING: Final = "thinking"
"""A model call is in flight and has produced no answer text yet."""
RESPONDING: Final = "responding"
"""The model is streaming answer text."""
TOOL_CALLING: Final = "tool_calling"
"""The model's tool calls are executing."""
OBSERVING: Final = "observing"
"""Tool results are in; the loop decides what comes next (usually another model turn)."""
AWAITING_APPROVAL: Final = "awaiting_approval"
"""A tool call waits for a human decision."""
WAITING: Final = "waiting"
"""A tool call waits for sub-agents or a reply (`sessions_wait`, `sessions_send`)."""
COMPLETED: Final = "completed"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"

RunStateName = Literal[
    "queued",
    "planning",
    "thinking",
    "responding",
    "tool_calling",
    "observing",
    "awaiting_approval",
    "waiting",
    "completed",
    "failed",
    "cancelled",
]

ENDINGS: Final = frozenset({COMPLETED, FAILED, CANCELLED})

TRANSITIONS: Final[Mapping[str, frozenset[str]]] = {
    # a resumed attempt continues wherever the stored transcript says the run is
    QUEUED: frozenset({PLANNING, THINKING, TOOL_CALLING, AWAITING_APPROVAL}) | ENDINGS,
    # the plan is stored: its next step starts with a model turn
    PLANNING: frozenset({THINKING}) | ENDINGS,
    # the turn streams text, calls tools, or (empty answer / failed plan step) moves on
    THINKING: frozenset({RESPONDING, TOOL_CALLING, PLANNING}) | ENDINGS,
    # after the answer: its tool calls, the next plan step, or a plan revision
    RESPONDING: frozenset({TOOL_CALLING, THINKING, PLANNING}) | ENDINGS,
    TOOL_CALLING: frozenset({OBSERVING, AWAITING_APPROVAL, WAITING}) | ENDINGS,
    # decided: the call runs (or its denial is observed); a parked run goes back to the queue
    AWAITING_APPROVAL: frozenset({TOOL_CALLING, OBSERVING, QUEUED}) | ENDINGS,
    # what it waited for arrived (or its time is up): the call finishes; parked: back to the queue
    WAITING: frozenset({TOOL_CALLING, OBSERVING, QUEUED}) | ENDINGS,
    OBSERVING: frozenset({THINKING}) | ENDINGS,
    COMPLETED: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
}


class InvalidTransitionError(ValueError):
    """A move the state machine does not allow (a bug in the loop, never a user error)."""


def check_transition(current: str, to: str) -> None:
    """Raise `InvalidTransitionError` unless `current → to` is allowed."""
    allowed = TRANSITIONS.get(current)
    if allowed is None:
        raise InvalidTransitionError(f"unknown run state {current!r}")
    if to not in allowed:
        raise InvalidTransitionError(
            f"run state {current!r} cannot change to {to!r} (allowed: {sorted(allowed)})"
        )
