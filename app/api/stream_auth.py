"""Who may read a stream: a bearer token, or on `GET /stream` only, a stream ticket.

`stream_principal` is the dependency of the stream route. With `?ticket=` it verifies the
ticket against the requested run and returns the principal the ticket carries (the stream then
reads under RLS exactly as that user's bearer token would); without one it is the ordinary bearer
authentication. No other route knows about tickets, so a ticket is useless anywhere else: it is
not a JWT (as a bearer token it is refused) and other routes ignore a `ticket` query parameter.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query
from fastapi.security import HTTPAuthorizationCredentials

from app.api.deps import RunIdQuery, SettingsDep, VerifierDep, bearer, current_principal
from app.api.errors import ApiError
from app.auth.principal import Principal
from app.auth.stream_ticket import MAX_TICKET_CHARS, TicketError, ticket_key, verify_ticket

TicketQuery = Annotated[
    str | None,
    Query(
        alias="ticket",
        max_length=MAX_TICKET_CHARS,
        description="A stream ticket for this run (`POST /api/agent-runtime/stream-tickets`), "
        "for clients that cannot send `Authorization` (a browser's `EventSource`).",
    ),
]


async def stream_principal(
    settings: SettingsDep,
    verifier: VerifierDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    run_id: RunIdQuery,
    ticket: TicketQuery = None,
) -> Principal:
    """The ticket's principal when `ticket` is given (the bearer token is then not used), else the
    bearer's; 401 for an invalid, expired or other run's ticket."""
    if ticket is None:
        return await current_principal(verifier, credentials)
    key = ticket_key(settings)
    if key is None:
        raise ApiError(401, "this server cannot verify stream tickets", field="ticket")
    try:
        return verify_ticket(key, ticket, run_id=run_id).principal
    except TicketError as exc:
        raise ApiError(401, exc.message, field="ticket") from exc


StreamPrincipal = Annotated[Principal, Depends(stream_principal)]
