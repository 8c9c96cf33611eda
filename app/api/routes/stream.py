"""The SSE replay of a run: stored events replayed, then live ones, until a terminal event.

The reading (replay, then live, without loss or repeats at the boundary) is `run_feed.follow_run`,
shared with the other framings; this module frames each event as SSE.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Header, Query
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.api.deps import QueueDep, RunIdQuery, Runtime, RuntimeDep
from app.api.errors import ApiError
from app.api.routes.runs import run_not_found
from app.api.run_feed import follow_run
from app.api.schemas import MAX_SEQ, error_responses
from app.api.stream_auth import StreamPrincipal
from app.auth.principal import Principal
from app.core.events import EVENT_CLASSES, EVENT_TYPES, RunEvent, wire_json

router = APIRouter(prefix="/api/agent-runtime", tags=["runs"])

_SSE_DOC = (
    "`text/event-stream`. Each event has `id` = the run's event seq (1, 2, …), `event` = its "
    "type and `data` = a JSON object with `type`, `runId`, `seq`, `ts` and the event's fields. "
    "Ends after `run.completed`, `run.failed` or `run.cancelled`; comment lines keep it alive."
)

SSE_EVENT_SCHEMA: dict[str, object] = {
    "type": "object",
    "description": "One Server-Sent Event (keep-alive comments are not events).",
    "required": ["id", "event", "data"],
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$", "description": "The event's seq."},
        "event": {"type": "string", "enum": list(EVENT_TYPES), "description": "The event's type."},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {
                "oneOf": [{"$ref": f"#/components/schemas/{cls.__name__}"} for cls in EVENT_CLASSES]
            },
            "description": "The event as a JSON object (`type`, `runId`, `seq`, `ts`, fields): "
            "one of the run event schemas.",
        },
    },
}
"""The OpenAPI schema of each event of `/stream` (a stream's `schema` describes one event)."""


def parse_last_event_id(value: str | None, field: str) -> int:
    """A resume position: a non-negative integer (absent or blank: 0, i.e. from the start)."""
    if value is None or not value.strip():
        return 0
    digits = value.strip()
    if not re.fullmatch(r"[0-9]{1,10}", digits) or int(digits) > MAX_SEQ:
        raise ApiError(422, f"{field} must be an integer between 0 and {MAX_SEQ}", field=field)
    return int(digits)


@router.get(
    "/stream",
    response_class=EventSourceResponse,
    responses={
        200: {
            "content": {"text/event-stream": {"schema": SSE_EVENT_SCHEMA}},
            "description": _SSE_DOC,
        },
        **error_responses(401, 404, 422),
    },
)
async def stream_run(
    principal: StreamPrincipal,
    queue: QueueDep,
    runtime: RuntimeDep,
    run_id: RunIdQuery,
    last_event_id_query: Annotated[
        str | None,
        Query(alias="lastEventId", description="Resume after this seq (wins over the header)."),
    ] = None,
    last_event_id_header: Annotated[
        str | None,
        Header(alias="Last-Event-ID", description="Resume after this seq (sent by EventSource)."),
    ] = None,
) -> EventSourceResponse:
    """Stream a run's events (SSE), resuming after `Last-Event-ID` / `lastEventId`."""
    if last_event_id_query is not None:
        after = parse_last_event_id(last_event_id_query, "lastEventId")
    else:
        after = parse_last_event_id(last_event_id_header, "Last-Event-ID")
    if await queue.get_run(principal, run_id) is None:
        raise run_not_found(run_id)
    return EventSourceResponse(
        run_event_stream(runtime, principal, run_id, after),
        ping=runtime.settings.sse_keepalive_seconds,
    )


async def run_event_stream(
    runtime: Runtime, principal: Principal, run_id: UUID, after_seq: int
) -> AsyncIterator[ServerSentEvent]:
    """The events of `run_id` after `after_seq` as SSE frames, ending after a terminal one."""
    async for event in follow_run(runtime, principal, run_id, after_seq):
        yield sse_frame(event)


def sse_frame(event: RunEvent) -> ServerSentEvent:
    """A stored event as an SSE frame: `id` = its seq, `event` = its type, `data` = its JSON."""
    return ServerSentEvent(
        data=json.dumps(wire_json(event), separators=(",", ":"), ensure_ascii=False),
        event=event.type,
        id=str(event.seq),
    )
