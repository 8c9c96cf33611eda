"""Tool calls (started, completed, failed) and the approvals that gate them."""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

from pydantic import Field

from app.core.events.base import EventBase, IsoDatetime, unset
from app.core.events.names import (
    APPROVAL_REQUIRED,
    APPROVAL_RESOLVED,
    TOOL_COMPLETED,
    TOOL_FAILED,
    TOOL_STARTED,
)


class ToolStartedEvent(EventBase):
    """A tool call is about to execute."""

    type: Literal["tool.started"] = TOOL_STARTED
    tool_call_id: str
    """The call's id (unique per run)."""
    name: str
    """The tool."""
    args: dict[str, Any]
    """The call's arguments."""
    purpose: str | None = Field(default=None, exclude_if=unset)
    """`memory_flush` for the calls of a memory flush (housekeeping, not a conversation turn);
    omitted when unset."""
    execution_id: UUID | None = Field(default=None, exclude_if=unset)
    """The id of the call's `tool_executions` row (`GET /runs/{runId}/tools`), filled in by the
    transaction that stores the event."""


class ToolCompletedEvent(EventBase):
    """A tool call succeeded."""

    type: Literal["tool.completed"] = TOOL_COMPLETED
    tool_call_id: str
    """The call's id."""
    name: str
    """The tool."""
    purpose: str | None = Field(default=None, exclude_if=unset)
    """As in `tool.started`; omitted when unset."""
    result: Any
    """The tool's JSON result."""
    execution_id: UUID | None = Field(default=None, exclude_if=unset)
    """The id of the call's `tool_executions` row."""


class ToolFailedEvent(EventBase):
    """A tool call failed, or was refused without running (policy, cap, denied approval)."""

    type: Literal["tool.failed"] = TOOL_FAILED
    tool_call_id: str
    """The call's id."""
    name: str
    """The tool."""
    purpose: str | None = Field(default=None, exclude_if=unset)
    """As in `tool.started`; omitted when unset."""
    error: str | None
    """What the model is told about the failure."""
    execution_id: UUID | None = Field(default=None, exclude_if=unset)
    """The id of the call's `tool_executions` row."""


class ApprovalRequiredEvent(EventBase):
    """A tool call waits for a human: the run is parked (status `awaiting_approval`)."""

    type: Literal["approval.required"] = APPROVAL_REQUIRED
    approval_id: UUID
    """Decide it with `POST /approvals/{approvalId}`."""
    tool_call_id: str
    """The waiting call."""
    tool: str
    """The tool."""
    args: dict[str, Any]
    """The call's arguments."""
    risk: str
    """The tool's risk level: `low`, `medium` or `high`."""
    reason: str
    """Which rule asks for the approval."""
    expires_at: IsoDatetime
    """Undecided by then, it counts as denied."""


class ApprovalResolvedEvent(EventBase):
    """An approval was decided, or expired."""

    type: Literal["approval.resolved"] = APPROVAL_RESOLVED
    approval_id: UUID
    """The approval."""
    decision: Literal["approve", "deny", "expired"]
    """The outcome."""
    decided_by: str | None
    """Who decided (`null` when it expired)."""
    reason: str | None = Field(default=None, exclude_if=unset)
    """The decider's reason, or why it expired; omitted when unset."""
    trust_seconds: int | None = Field(default=None, exclude_if=unset)
    """How long the session trusts this tool for this reason; omitted when unset."""
