"""The AI SDK chat protocol (what `useChat` with its `DefaultChatTransport` speaks).

`POST /chat` runs the last user message in the chat's session and answers with the run as a UI
message stream (`app.api.adapters.ui_message_stream`); `GET /chat/{id}/stream` is the
transport's `reconnectToStream` (`useChat({ resume: true })`): the session's active run from its
start, or 204. Both read the run's stored events like `/stream` does, so a run can be watched
both ways at once. Stopping a run is `POST /cancel?runId=<the assistant message's id>` (the
client's `stop()` only closes its connection; the run goes on).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Path, Response
from sqlalchemy.ext.asyncio import AsyncSession
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.api.adapters.ui_message_stream import (
    DONE,
    PROTOCOL_HEADERS,
    UIMessageStream,
    chunk_json,
)
from app.api.chat_schemas import ChatRequest
from app.api.deps import CurrentPrincipal, JsonBody, QueueDep, Runtime, RuntimeDep
from app.api.errors import ApiError
from app.api.idempotency import (
    IdempotencyKeyHeader,
    answer_idempotently,
    idempotent_responses,
    replayed_headers,
)
from app.api.run_feed import follow_run
from app.api.schemas import (
    SESSION_KEY_PATTERN,
    busy_responses,
    error_responses,
    quota_responses,
)
from app.auth.principal import Principal
from app.queue.idempotency import Answer
from app.sessions.store import active_run_id

router = APIRouter(prefix="/api/agent-runtime", tags=["chat"])

_STREAM_DOC = (
    "The AI SDK's UI message stream, protocol v1 (`x-vercel-ai-ui-message-stream: v1`): one "
    "`data: {json}` frame per chunk (`start` with `messageId` = the run id, `start-step`, "
    "`text-*`, `reasoning-*`, `tool-input-available`, `tool-output-*`, `data-*`, "
    "`finish-step`, `error`, `abort`, `finish`), then `data: [DONE]`. Comment lines keep it "
    "alive."
)
_CHUNK_SCHEMA: dict[str, object] = {
    "type": "object",
    "description": "One frame of the stream (keep-alive comments are not frames).",
    "required": ["data"],
    "properties": {
        "data": {
            "type": "string",
            "description": "A UI message chunk as JSON (`type` and its fields), or `[DONE]`.",
        }
    },
}
_PROTOCOL_HEADER = {
    "x-vercel-ai-ui-message-stream": {
        "description": "The protocol: `v1`.",
        "schema": {"type": "string", "enum": ["v1"]},
    }
}
_STREAM_RESPONSE = {
    "content": {"text/event-stream": {"schema": _CHUNK_SCHEMA}},
    "description": _STREAM_DOC,
    "headers": _PROTOCOL_HEADER,
}

ChatIdPath = Annotated[
    str,
    Path(
        alias="id",
        min_length=1,
        max_length=200,
        pattern=SESSION_KEY_PATTERN,
        description="The chat id (the session key).",
    ),
]


@router.post(
    "/chat",
    response_class=EventSourceResponse,
    responses={
        **error_responses(401, 403, 404, 422),
        **busy_responses(),
        **quota_responses(),
        **idempotent_responses(200),
        200: {**_STREAM_RESPONSE, **idempotent_responses(200)[200]},
    },
)
async def chat(
    principal: CurrentPrincipal,
    queue: QueueDep,
    runtime: RuntimeDep,
    _json: JsonBody,
    body: ChatRequest,
    idempotency_key: IdempotencyKeyHeader = None,
) -> EventSourceResponse:
    """Run the last user message in the chat's session; answer with the run as a UI message
    stream (the AI SDK's `useChat`). A retry with the same `Idempotency-Key` streams the same run
    again instead of queueing the message twice. `ifBusy=steer`/`collect`: the run that takes
    the message (the live one, the collecting one) is streamed."""
    try:
        text = body.user_text()
    except ValueError as exc:
        raise ApiError(422, f"messages: the last user message {exc}", field="messages") from exc

    async def enqueue(s: AsyncSession) -> Answer:
        enqueued = await queue.enqueue_in(
            s,
            principal,
            message=text,
            session_key=body.id,
            agent_id=body.agent_id,
            if_busy=body.if_busy,
            check_quotas=True,
        )
        return Answer(run_id=enqueued.run_id, status_code=200)

    outcome = await answer_idempotently(
        runtime.db,
        principal,
        idempotency_key,
        operation="chat",
        # without `ifBusy` when not given: keys stored before the field existed still match
        body=body.model_dump(
            mode="json", by_alias=True, exclude={"if_busy"} if body.if_busy is None else set()
        ),
        create=enqueue,
    )
    return _ui_message_response(
        runtime, principal, outcome.answer.run_id, headers=replayed_headers(outcome)
    )


@router.get(
    "/chat/{id}/stream",
    response_class=EventSourceResponse,
    responses={
        200: _STREAM_RESPONSE,
        204: {"description": "The chat has no queued, running or parked run."},
        **error_responses(401, 422),
    },
)
async def resume_chat(
    principal: CurrentPrincipal, runtime: RuntimeDep, chat_id: ChatIdPath
) -> Response:
    """The chat's active run as a UI message stream from its start (`useChat({ resume: true })`),
    or 204 when nothing is active."""
    async with runtime.db.tenant(principal) as s:
        run_id = await active_run_id(s, chat_id)
    if run_id is None:
        return Response(status_code=204)
    return _ui_message_response(runtime, principal, run_id)


def _ui_message_response(
    runtime: Runtime, principal: Principal, run_id: UUID, headers: dict[str, str] | None = None
) -> EventSourceResponse:
    return EventSourceResponse(
        ui_message_frames(runtime, principal, run_id),
        headers={**PROTOCOL_HEADERS, **(headers or {})},
        ping=runtime.settings.sse_keepalive_seconds,
        sep="\n",
    )


async def ui_message_frames(
    runtime: Runtime, principal: Principal, run_id: UUID
) -> AsyncIterator[ServerSentEvent]:
    """The run's events from its first, as UI message chunks, then `[DONE]`."""
    stream = UIMessageStream(str(run_id))
    for chunk in stream.start():
        yield _frame(chunk_json(chunk))
    async for event in follow_run(runtime, principal, run_id, 0):
        for chunk in stream.feed(event):
            yield _frame(chunk_json(chunk))
    for chunk in stream.close():
        yield _frame(chunk_json(chunk))
    yield _frame(DONE)


def _frame(data: str) -> ServerSentEvent:
    """`data: …\\n\\n`, exactly as the AI SDK's `JsonToSseTransformStream` writes it."""
    return ServerSentEvent(data=data, sep="\n")
