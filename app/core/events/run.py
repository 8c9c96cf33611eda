"""The run's life: queued, started or resumed, handed back, finished; and its loop's states."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from app.core.events.base import EventBase, EventError
from app.core.events.names import (
    RUN_CANCELLED,
    RUN_COMPLETED,
    RUN_FAILED,
    RUN_QUEUED,
    RUN_REQUEUED,
    RUN_RESUMED,
    RUN_STARTED,
    STATE_CHANGED,
)


class RunQueuedEvent(EventBase):
    """The run was accepted into its session's lane (always seq 1)."""

    type: Literal["run.queued"] = RUN_QUEUED
    session_key: str
    """The session the run belongs to."""
    status: Literal["queued"] = "queued"
    """The run's status: `queued`."""


class RunStartedEvent(EventBase):
    """A worker started the run (first attempt)."""

    type: Literal["run.started"] = RUN_STARTED
    attempt: int
    """1 for the first attempt."""
    worker_id: str
    """The worker that holds the run."""


class RunResumedEvent(EventBase):
    """A worker took over a run whose previous attempt ended (crash, hand-back, approval)."""

    type: Literal["run.resumed"] = RUN_RESUMED
    attempt: int
    """The attempt now running (2, 3, …)."""
    worker_id: str
    """The worker that holds the run."""


class RunRequeuedEvent(EventBase):
    """A stopping worker handed the run back to the head of its lane."""

    type: Literal["run.requeued"] = RUN_REQUEUED
    attempt: int
    """The attempt that was interrupted."""


class RunCompletedEvent(EventBase):
    """The run ended with an answer (terminal)."""

    type: Literal["run.completed"] = RUN_COMPLETED
    result: dict[str, Any] | None
    """`{text}`: the final answer."""


class RunFailedEvent(EventBase):
    """The run ended without an answer (terminal)."""

    type: Literal["run.failed"] = RUN_FAILED
    error: EventError | None
    """Why: `max_turns_exceeded`, `run_timeout`, `model_error`, `context_overflow`,
    `worker_crashed`, …"""


class RunCancelledEvent(EventBase):
    """The run was cancelled (terminal)."""

    type: Literal["run.cancelled"] = RUN_CANCELLED
    reason: str
    """E.g. `cancelled`, `cancelled by request`."""


class StateChangedEvent(EventBase):
    """The loop moved to another state (`app.core.state_machine`): `queued`, `planning`,
    `thinking`, `responding`, `tool_calling`, `observing`, `awaiting_approval`, `completed`,
    `failed`."""

    type: Literal["state.changed"] = STATE_CHANGED
    from_: str = Field(alias="from")
    """The state before."""
    to: str
    """The state now (also `state` in `/status`)."""
