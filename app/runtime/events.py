"""Run event types: stored in `run_events`, streamed over SSE with the per-run `seq` as the id."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final
from uuid import UUID

RUN_QUEUED: Final = "run.queued"
RUN_STARTED: Final = "run.started"
RUN_RESUMED: Final = "run.resumed"
RUN_REQUEUED: Final = "run.requeued"
ASSISTANT_DELTA: Final = "assistant.delta"
ASSISTANT_MESSAGE: Final = "assistant.message"
TOOL_STARTED: Final = "tool.started"
TOOL_COMPLETED: Final = "tool.completed"
TOOL_FAILED: Final = "tool.failed"
USAGE: Final = "usage"
RUN_COMPLETED: Final = "run.completed"
RUN_FAILED: Final = "run.failed"
RUN_CANCELLED: Final = "run.cancelled"
THINKING_DELTA: Final = "thinking.delta"
"""A chunk of the model's reasoning, `{text}`; shown to clients, never in the transcript."""
MODEL_RETRY: Final = "model.retry"
"""A model call failed transiently and is retried: `{attempt, delaySeconds, reason}`."""
ASSISTANT_RESET: Final = "assistant.reset"
"""The model call restarts: drop the turn's partial text and thinking streamed so far."""
APPROVAL_REQUIRED: Final = "approval.required"
"""A tool call waits for a human: `{approvalId, toolCallId, tool, args, risk, reason, expiresAt}`."""
APPROVAL_RESOLVED: Final = "approval.resolved"
"""`{approvalId, decision (approve|deny|expired), decidedBy, reason?, trustSeconds?}`."""

STATE_CHANGED: Final = "state.changed"
"""The loop moved to another state (`app.core.state_machine`): `{from, to}`."""
PLAN_CREATED: Final = "plan.created"
"""Plan mode: the run's plan, `{plan: {steps: [{index, description, tools, status}]}}`."""
PLAN_STEP: Final = "plan.step"
"""Plan mode: a step's status changed, `{index, status (running|done|failed|skipped), reason?}`."""
PLAN_UPDATED: Final = "plan.updated"
"""Plan mode: the plan was revised after a failed step, `{plan, revision, reason}`."""
PLAN_INVALID: Final = "plan.invalid"
"""Plan mode: the model's plan was rejected, `{attempt, error}` (re-asked once, then the run fails)."""

CONTEXT_COMPACTING: Final = "context.compacting"
"""The next call would not fit the context window: older messages are being summarised,
`{fromSeq, toSeq, messages, tokensBefore, budget, window}`."""
CONTEXT_COMPACTED: Final = "context.compacted"
"""`{snapshotId, fromSeq, toSeq, messages, tokensBefore, tokensAfter, summaryTokens}`: the
messages up to `toSeq` are now sent as the summary (the transcript keeps every row)."""
CONTEXT_COMPACTION_FAILED: Final = "context.compaction_failed"
"""`{error: {code, message}}`: the run goes on uncompacted while its context fits the window."""
MEMORY_FLUSHED: Final = "memory.flushed"
"""Before a compaction the model was offered `memory_store`: `{throughSeq, stored, failed}` (the
calls themselves stream as `tool.*` events with `purpose: "memory_flush"`)."""

TERMINAL_EVENTS: Final = frozenset({RUN_COMPLETED, RUN_FAILED, RUN_CANCELLED})


def event_envelope(
    *, run_id: UUID, seq: int, type_: str, ts: datetime, data: dict[str, Any]
) -> dict[str, Any]:
    """The JSON body of an SSE event: `type`, `runId`, `seq`, `ts` plus the event's own fields."""
    return {**data, "type": type_, "runId": str(run_id), "seq": seq, "ts": ts.isoformat()}
