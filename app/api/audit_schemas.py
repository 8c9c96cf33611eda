"""Response bodies of the audit trail API (`GET /api/agent-runtime/audit`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from app.api.schemas import ApiModel
from app.db.models import AuditEvent

_TS = "2025-01-01T12:00:00Z"


class AuditEventInfo(ApiModel):
    """One audit event: who (`actorId`, `actorRole`) did what (`action`) to which thing
    (`targetType`, `targetId`), when, in which request."""

    id: int = Field(examples=[1042])
    tenant_id: str = Field(examples=["acme"])
    actor_id: str = Field(examples=["alice"], description="The user; a worker acts as the run's.")
    actor_role: str = Field(examples=["owner"], description="owner | admin | member | service")
    action: str = Field(examples=["run.created"], description="`<target>.<verb>`")
    target_type: str = Field(examples=["run"])
    target_id: str | None = Field(default=None, examples=["7b0f2a64-4a8e-4f0e-9d61-2f3c7f0b9e11"])
    before: dict[str, Any] | None = Field(
        default=None, description="The target before, if changed."
    )
    after: dict[str, Any] | None = Field(
        default=None,
        examples=[{"sessionKey": "s_1", "ifBusy": "enqueue", "messageLength": 5}],
        description="The target after, or the facts of the action (never a secret).",
    )
    request_id: str | None = Field(
        default=None, examples=["req_5f0c2d"], description="The HTTP request's `X-Request-Id`."
    )
    created_at: datetime = Field(examples=[_TS])

    @classmethod
    def of(cls, event: AuditEvent) -> AuditEventInfo:
        """The wire form of a stored event."""
        return cls(
            id=event.id,
            tenant_id=event.tenant_id,
            actor_id=event.actor_id,
            actor_role=event.actor_role,
            action=event.action,
            target_type=event.target_type,
            target_id=event.target_id,
            before=event.before,
            after=event.after,
            request_id=event.request_id,
            created_at=event.created_at,
        )


class AuditEventsPage(ApiModel):
    """A page of audit events, newest first."""

    events: list[AuditEventInfo]
    next_cursor: str | None = Field(
        default=None, description="Pass as `cursor` for the next (older) page; null: no more."
    )
