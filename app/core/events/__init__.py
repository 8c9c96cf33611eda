"""Run events: one pydantic class per event type, discriminated on `type` (the `RunEvent` union).

The same objects are created by the code that makes something happen, stored in `run_events`
(`type` and `data`, see `event_data`), replayed over SSE and paged by `GET /runs/{runId}/events`.
On the wire an event is one flat camelCase JSON object: the envelope (`runId`, `seq`, `ts`, set
on stored events only), `type`, and the event's own fields. A field documented "omitted when
unset" is left out of the JSON rather than sent as `null`. A stream adapter (SSE today; other
framings tomorrow) reads this package and pattern-matches on the union; nothing else needs to
know what events look like.

The classes live by concern in `run`, `model`, `tools`, `plan` and `context` (on `base`), their
type names in `names`; everything is importable from here. `run_events.seq` is strictly
increasing per run from 1 (`run.queued` is 1); the stream ends after one of `TERMINAL_EVENTS`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final, get_args
from uuid import UUID

from pydantic import Field, TypeAdapter

from app.core.events.agents import (
    InjectedSource,
    MessageInjectedEvent,
    RunInterruptedEvent,
    SubagentCompletedEvent,
    SubagentOutcome,
    SubagentSpawnedEvent,
)
from app.core.events.base import EventBase, EventError, IsoDatetime, PlanOutline
from app.core.events.context import (
    ContextCompactedEvent,
    ContextCompactingEvent,
    ContextCompactionFailedEvent,
    MemoryFlushedEvent,
)
from app.core.events.model import (
    AssistantDeltaEvent,
    AssistantMessageEvent,
    AssistantResetEvent,
    ModelFallbackEvent,
    ModelRetryEvent,
    ThinkingDeltaEvent,
    UsageEvent,
)
from app.core.events.names import (
    APPROVAL_REQUIRED,
    APPROVAL_RESOLVED,
    ASSISTANT_DELTA,
    ASSISTANT_MESSAGE,
    ASSISTANT_RESET,
    CONTEXT_COMPACTED,
    CONTEXT_COMPACTING,
    CONTEXT_COMPACTION_FAILED,
    MEMORY_FLUSHED,
    MESSAGE_INJECTED,
    MODEL_FALLBACK,
    MODEL_RETRY,
    PLAN_CREATED,
    PLAN_INVALID,
    PLAN_STEP,
    PLAN_UPDATED,
    RUN_CANCELLED,
    RUN_COMPLETED,
    RUN_FAILED,
    RUN_INTERRUPTED,
    RUN_QUEUED,
    RUN_REQUEUED,
    RUN_RESUMED,
    RUN_STARTED,
    STATE_CHANGED,
    SUBAGENT_COMPLETED,
    SUBAGENT_SPAWNED,
    TERMINAL_EVENTS,
    THINKING_DELTA,
    TOOL_COMPLETED,
    TOOL_FAILED,
    TOOL_STARTED,
    USAGE,
)
from app.core.events.plan import PlanCreatedEvent, PlanInvalidEvent, PlanStepEvent, PlanUpdatedEvent
from app.core.events.run import (
    RunCancelledEvent,
    RunCompletedEvent,
    RunFailedEvent,
    RunQueuedEvent,
    RunRequeuedEvent,
    RunResumedEvent,
    RunStartedEvent,
    StateChangedEvent,
)
from app.core.events.tools import (
    ApprovalRequiredEvent,
    ApprovalResolvedEvent,
    ToolCompletedEvent,
    ToolFailedEvent,
    ToolStartedEvent,
)

RunEvent = Annotated[
    RunQueuedEvent
    | RunStartedEvent
    | RunRequeuedEvent
    | RunResumedEvent
    | AssistantDeltaEvent
    | ThinkingDeltaEvent
    | AssistantResetEvent
    | ModelRetryEvent
    | ModelFallbackEvent
    | AssistantMessageEvent
    | ToolStartedEvent
    | ToolCompletedEvent
    | ToolFailedEvent
    | UsageEvent
    | StateChangedEvent
    | ApprovalRequiredEvent
    | ApprovalResolvedEvent
    | PlanCreatedEvent
    | PlanUpdatedEvent
    | PlanStepEvent
    | PlanInvalidEvent
    | ContextCompactingEvent
    | ContextCompactedEvent
    | ContextCompactionFailedEvent
    | MemoryFlushedEvent
    | SubagentSpawnedEvent
    | SubagentCompletedEvent
    | MessageInjectedEvent
    | RunInterruptedEvent
    | RunCompletedEvent
    | RunFailedEvent
    | RunCancelledEvent,
    Field(discriminator="type"),
]
"""Any run event (the order is the README's)."""
RUN_EVENT_ADAPTER: TypeAdapter[RunEvent] = TypeAdapter(RunEvent)
"""Validates and dumps any run event (its `json_schema()` documents every event)."""
EVENT_CLASSES: Final[tuple[type[EventBase], ...]] = get_args(get_args(RunEvent)[0])
"""Every event class, in the union's order."""
EVENT_TYPES: Final[tuple[str, ...]] = tuple(
    cls.model_fields["type"].default for cls in EVENT_CLASSES
)
"""Every event type name, in the union's order."""

_NOT_DATA: Final = frozenset({"type", "run_id", "seq", "ts"})


def event_data(event: RunEvent) -> dict[str, Any]:
    """The event's own fields, as stored in `run_events.data` (camelCase JSON, without `type`
    and the envelope)."""
    return event.model_dump(mode="json", by_alias=True, exclude=set(_NOT_DATA))


def event_data_json(event: RunEvent) -> str:
    """`event_data` as JSON text (serialized by pydantic, without a dict in between)."""
    return event.model_dump_json(by_alias=True, exclude=set(_NOT_DATA))


def stored_event(
    *, type_: str, data: dict[str, Any], run_id: UUID, seq: int, ts: datetime
) -> RunEvent:
    """A stored event (`run_events` row) as its class, with its envelope."""
    return RUN_EVENT_ADAPTER.validate_python(
        {**data, "type": type_, "run_id": run_id, "seq": seq, "ts": ts}
    )


def wire_json(event: RunEvent) -> dict[str, Any]:
    """The event as clients see it (SSE `data`, `/runs/{runId}/events`): camelCase JSON."""
    return event.model_dump(mode="json", by_alias=True)


__all__ = [
    "InjectedSource",
    "MESSAGE_INJECTED",
    "MessageInjectedEvent",
    "RUN_INTERRUPTED",
    "RunInterruptedEvent",
    "SUBAGENT_COMPLETED",
    "SUBAGENT_SPAWNED",
    "SubagentCompletedEvent",
    "SubagentOutcome",
    "SubagentSpawnedEvent",
    "APPROVAL_REQUIRED",
    "APPROVAL_RESOLVED",
    "ASSISTANT_DELTA",
    "ASSISTANT_MESSAGE",
    "ASSISTANT_RESET",
    "ApprovalRequiredEvent",
    "ApprovalResolvedEvent",
    "AssistantDeltaEvent",
    "AssistantMessageEvent",
    "AssistantResetEvent",
    "CONTEXT_COMPACTED",
    "CONTEXT_COMPACTING",
    "CONTEXT_COMPACTION_FAILED",
    "ContextCompactedEvent",
    "ContextCompactingEvent",
    "ContextCompactionFailedEvent",
    "EVENT_CLASSES",
    "EVENT_TYPES",
    "EventBase",
    "EventError",
    "IsoDatetime",
    "MEMORY_FLUSHED",
    "MODEL_FALLBACK",
    "MODEL_RETRY",
    "MemoryFlushedEvent",
    "ModelFallbackEvent",
    "ModelRetryEvent",
    "PLAN_CREATED",
    "PLAN_INVALID",
    "PLAN_STEP",
    "PLAN_UPDATED",
    "PlanCreatedEvent",
    "PlanInvalidEvent",
    "PlanOutline",
    "PlanStepEvent",
    "PlanUpdatedEvent",
    "RUN_CANCELLED",
    "RUN_COMPLETED",
    "RUN_EVENT_ADAPTER",
    "RUN_FAILED",
    "RUN_QUEUED",
    "RUN_REQUEUED",
    "RUN_RESUMED",
    "RUN_STARTED",
    "RunCancelledEvent",
    "RunCompletedEvent",
    "RunEvent",
    "RunFailedEvent",
    "RunQueuedEvent",
    "RunRequeuedEvent",
    "RunResumedEvent",
    "RunStartedEvent",
    "STATE_CHANGED",
    "StateChangedEvent",
    "TERMINAL_EVENTS",
    "THINKING_DELTA",
    "TOOL_COMPLETED",
    "TOOL_FAILED",
    "TOOL_STARTED",
    "ThinkingDeltaEvent",
    "ToolCompletedEvent",
    "ToolFailedEvent",
    "ToolStartedEvent",
    "USAGE",
    "UsageEvent",
    "event_data",
    "event_data_json",
    "stored_event",
    "wire_json",
]
