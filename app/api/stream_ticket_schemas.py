"""Bodies of `POST /api/agent-runtime/stream-tickets`."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import ConfigDict, Field

from app.api.schemas import ApiModel

_RUN_ID = "7b0f2a64-4a8e-4f0e-9d61-2f3c7f0b9e11"


class StreamTicketRequest(ApiModel):
    """The run a ticket is for."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"runId": _RUN_ID}]})

    run_id: UUID = Field(description="A run visible to the caller.")


class StreamTicketIssued(ApiModel):
    """A ticket for `GET /api/agent-runtime/stream?runId=…&ticket=…`."""

    ticket: str = Field(
        description="Opaque; valid for this run's stream only, until `expiresAt`, across "
        "reconnects. Treat it like a password: it must not be logged or shared.",
        examples=["st1.eyJyIjoi…"],
    )
    expires_at: datetime = Field(examples=["2025-01-01T12:05:00Z"])
