"""`POST /stream-tickets`: trade a bearer token for a ticket to one run's SSE stream."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter

from app.api.deps import CurrentPrincipal, JsonBody, QueueDep, SettingsDep
from app.api.errors import ApiError
from app.api.routes.runs import run_not_found
from app.api.schemas import error_responses
from app.api.stream_ticket_schemas import StreamTicketIssued, StreamTicketRequest
from app.auth.stream_ticket import mint_ticket, ticket_key

router = APIRouter(prefix="/api/agent-runtime", tags=["runs"])


@router.post(
    "/stream-tickets",
    status_code=201,
    response_model=StreamTicketIssued,
    responses=error_responses(401, 404, 422, 503),
)
async def create_stream_ticket(
    principal: CurrentPrincipal,
    settings: SettingsDep,
    queue: QueueDep,
    _json: JsonBody,
    body: StreamTicketRequest,
) -> StreamTicketIssued:
    """A short-lived ticket to follow one run with `EventSource` (`/stream?runId=…&ticket=…`)."""
    key = ticket_key(settings)
    if key is None:
        raise ApiError(503, "stream tickets need STREAM_TICKET_SECRET (or a JWT secret)")
    if await queue.get_run(principal, body.run_id) is None:
        raise run_not_found(body.run_id)
    ticket, grant = mint_ticket(
        key, principal, body.run_id, ttl_seconds=settings.stream_ticket_seconds
    )
    return StreamTicketIssued(
        ticket=ticket, expires_at=datetime.fromtimestamp(grant.expires_at, tz=UTC)
    )
