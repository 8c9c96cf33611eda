"""The names of the run event types (the `type` of each event, the SSE `event` field)."""

from __future__ import annotations

from typing import Final

RUN_QUEUED: Final = "run.queued"
RUN_STARTED: Final = "run.started"
RUN_RESUMED: Final = "run.resumed"
RUN_REQUEUED: Final = "run.requeued"
ASSISTANT_DELTA: Final = "assistant.delta"
ASSISTANT_MESSAGE: Final = "assistant.message"
ASSISTANT_RESET: Final = "assistant.reset"
THINKING_DELTA: Final = "thinking.delta"
MODEL_RETRY: Final = "model.retry"
TOOL_STARTED: Final = "tool.started"
TOOL_COMPLETED: Final = "tool.completed"
TOOL_FAILED: Final = "tool.failed"
USAGE: Final = "usage"
STATE_CHANGED: Final = "state.changed"
APPROVAL_REQUIRED: Final = "approval.required"
APPROVAL_RESOLVED: Final = "approval.resolved"
PLAN_CREATED: Final = "plan.created"
PLAN_UPDATED: Final = "plan.updated"
PLAN_STEP: Final = "plan.step"
PLAN_INVALID: Final = "plan.invalid"
CONTEXT_COMPACTING: Final = "context.compacting"
CONTEXT_COMPACTED: Final = "context.compacted"
CONTEXT_COMPACTION_FAILED: Final = "context.compaction_failed"
MEMORY_FLUSHED: Final = "memory.flushed"
RUN_COMPLETED: Final = "run.completed"
RUN_FAILED: Final = "run.failed"
RUN_CANCELLED: Final = "run.cancelled"

TERMINAL_EVENTS: Final = frozenset({RUN_COMPLETED, RUN_FAILED, RUN_CANCELLED})
"""The events that end a run's stream."""
