"""Context management: compactions of the transcript sent to the model, and memory flushes."""

from __future__ import annotations

from typing import Literal
from uuid import UUID

from pydantic import Field

from app.core.events.base import EventBase, EventError, unset
from app.core.events.names import (
    CONTEXT_COMPACTED,
    CONTEXT_COMPACTING,
    CONTEXT_COMPACTION_FAILED,
    MEMORY_FLUSHED,
)


class ContextCompactingEvent(EventBase):
    """The next call would not fit the context window: older messages are being summarised."""

    type: Literal["context.compacting"] = CONTEXT_COMPACTING
    from_seq: int
    """The first transcript row the summary will stand for."""
    to_seq: int
    """The last transcript row the summary will stand for."""
    messages: int
    """How many transcript messages are summarised."""
    tokens_before: int
    """The context's size before."""
    budget: int
    """Most input tokens a call may take (window minus the reserve for the answer)."""
    window: int
    """The model's context window."""


class ContextCompactedEvent(EventBase):
    """The messages up to `toSeq` are now sent as a summary (the transcript keeps every row)."""

    type: Literal["context.compacted"] = CONTEXT_COMPACTED
    snapshot_id: UUID
    """The stored summary (`GET /sessions/{key}/compactions`)."""
    from_seq: int
    """The first transcript row the summary stands for."""
    to_seq: int
    """The last transcript row the summary stands for."""
    messages: int
    """How many transcript messages were summarised."""
    tokens_before: int
    """The context's size before."""
    tokens_after: int
    """The context's size after (estimated)."""
    summary_tokens: int
    """The summary's size (estimated)."""


class ContextCompactionFailedEvent(EventBase):
    """A compaction failed: the run goes on uncompacted while its context fits the window."""

    type: Literal["context.compaction_failed"] = CONTEXT_COMPACTION_FAILED
    error: EventError
    """Why."""


class MemoryFlushedEvent(EventBase):
    """Before a compaction the model was offered `memory_store` (its calls stream as `tool.*`
    events with `purpose: "memory_flush"`)."""

    type: Literal["memory.flushed"] = MEMORY_FLUSHED
    through_seq: int
    """Transcript rows up to this one were offered (never offered again)."""
    error: EventError | None = Field(default=None, exclude_if=unset)
    """Why the flush call failed; omitted when it did not."""
    stored: int
    """`memory_store` calls that succeeded."""
    failed: int
    """`memory_store` calls that failed or were refused."""
