"""`Idempotency-Key` on routes that create a run: the header, the one call, the replayed answer.

A route declares `idempotency_key: IdempotencyKeyHeader = None`, passes its creation step to
`answer_idempotently` and sends the outcome back (`json_answer` for a JSON answer; a streaming
route streams `outcome.answer.run_id`, adding `replayed_headers(outcome)`). The store and its
guarantees are in `app.queue.idempotency`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Header
from fastapi.responses import JSONResponse
from sqlalchemy.ext.asyncio import AsyncSession

from app.api.errors import ApiError
from app.api.schemas import ErrorResponse
from app.auth.principal import Principal
from app.db.engine import Database
from app.queue.busy import retry_contended
from app.queue.idempotency import (
    IDEMPOTENCY_TTL,
    KEY_PATTERN,
    MAX_KEY_CHARS,
    Answer,
    IdempotencyKeyReusedError,
    KeyedRequest,
    Outcome,
    answer_once,
)

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
_TTL_HOURS = int(IDEMPOTENCY_TTL.total_seconds() // 3600)

IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias=IDEMPOTENCY_HEADER,
        min_length=1,
        max_length=MAX_KEY_CHARS,
        pattern=KEY_PATTERN,
        description=(
            f"Makes retries safe: 1–{MAX_KEY_CHARS} printable ASCII characters, unique per "
            f"request (a UUID is a good choice). A request repeated with the same key within "
            f"{_TTL_HOURS} h gets the first request's answer again (same status and body, with "
            f"`{REPLAYED_HEADER}: true`) and creates no second run, even when both arrive at "
            f"once; the same key with a different body is `422 idempotency_key_reused`. Keys "
            f"are per user; a failed request stores nothing, so it may be retried as it was."
        ),
        examples=["5f0c6c1e-3b1d-4a55-9a57-0d1bd0a5b8c4"],
    ),
]


def idempotent_responses(status: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries of a keyed route: the replay header on its success status,
    and its 422 (merge after `error_responses`, which this 422 description replaces)."""
    return {
        status: {
            "headers": {
                REPLAYED_HEADER: {
                    "description": f"`true` when this is the stored answer to an earlier request "
                    f"with the same `{IDEMPOTENCY_HEADER}` (absent otherwise).",
                    "schema": {"type": "string", "enum": ["true"]},
                }
            }
        },
        422: {
            "model": ErrorResponse,
            "description": "Invalid input; `error.field` names it and `error.details` lists "
            "every problem. `idempotency_key_reused` (field `Idempotency-Key`): the key was "
            f"used for a different request within {_TTL_HOURS} h.",
        },
    }


def key_reused(exc: IdempotencyKeyReusedError) -> ApiError:
    """The 422 for a key already used with another request body."""
    return ApiError(
        422,
        f"{IDEMPOTENCY_HEADER} {exc.key!r} was already used for a different request (within "
        f"{_TTL_HOURS} h); use a new key for a new request",
        code="idempotency_key_reused",
        field=IDEMPOTENCY_HEADER,
    )


async def answer_idempotently(
    db: Database,
    principal: Principal,
    key: str | None,
    *,
    operation: str,
    body: Any,
    create: Callable[[AsyncSession], Awaitable[Answer]],
) -> Outcome:
    """Run `create` in a tenant transaction, at most once per key: a repeated request (same
    `operation` and JSON `body`) gets the stored answer. Without a key, just `create`."""
    request = None if key is None else KeyedRequest.of(key, operation, body)

    async def attempt() -> Outcome:
        async with db.tenant(principal) as s:
            return await answer_once(s, principal, request, create)

    try:
        # A post that met a worker's lock on one of the session's runs is tried again whole.
        return await retry_contended(attempt)
    except IdempotencyKeyReusedError as exc:
        raise key_reused(exc) from exc


def replayed_headers(outcome: Outcome) -> dict[str, str]:
    """`Idempotent-Replayed: true` on a replay; nothing on a first answer."""
    return {REPLAYED_HEADER: "true"} if outcome.replayed else {}


def json_answer(outcome: Outcome) -> JSONResponse:
    """The outcome's JSON answer, exactly as first sent."""
    return JSONResponse(
        outcome.answer.body,
        status_code=outcome.answer.status_code,
        headers=replayed_headers(outcome),
    )
