"""One JSON error shape for every failure: `{"error": {"code", "message", "field"?, "details"?}}`.

Handlers cover our `ApiError`, the queue's NotFoundError/ConflictError, FastAPI's validation
errors, Starlette's HTTP errors (unknown route, wrong method; a JSON body FastAPI could not decode,
e.g. not UTF-8, becomes `invalid_json` on field `body`) and, last, anything unexpected (logged,
answered with a generic 500 that leaks nothing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.core.errors import (
    ConflictError,
    ForbiddenError,
    NotFoundError,
    QuotaExceededError,
    SessionBusyError,
)
from app.queue.busy import LaneContendedError

log = structlog.get_logger(__name__)

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "quota_exceeded",
    503: "unavailable",
}
_LOCATIONS = {"body", "query", "path", "header", "cookie"}


class ApiError(Exception):
    """An error answered as JSON with `status`; `field` names the offending input, if any."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _CODES.get(status, "error")
        self.message = message
        self.field = field
        self.headers = dict(headers or {})


def error_body(
    code: str,
    message: str,
    *,
    field: str | None = None,
    details: list[dict[str, Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON error document (`extra`: more members of `error`, e.g. `runId`)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        error["field"] = field
    if details is not None:
        error["details"] = details
    error.update(extra or {})
    return {"error": error}


def error_response(exc: ApiError) -> JSONResponse:
    """Render an `ApiError`."""
    return JSONResponse(
        error_body(exc.code, exc.message, field=exc.field),
        status_code=exc.status,
        headers=exc.headers or None,
    )


def field_of(loc: Sequence[str | int]) -> str:
    """The input a validation error is about: `("body", "message")` -> `message`."""
    parts = list(loc)
    if len(parts) > 1 and parts[0] in _LOCATIONS:
        parts = parts[1:]
    return ".".join(str(p) for p in parts) or "request"


def _validation_response(exc: RequestValidationError) -> JSONResponse:
    errors = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in errors):
        reason = errors[0].get("ctx", {}).get("error", "invalid JSON")
        return JSONResponse(
            error_body("invalid_json", f"request body is not valid JSON: {reason}", field="body"),
            status_code=400,
        )
    details = [
        {"field": field_of(e.get("loc", ())), "message": str(e.get("msg", "")), "type": e["type"]}
        for e in errors
    ]
    first = details[0] if details else {"field": "request", "message": "invalid request"}
    return JSONResponse(
        error_body(
            "validation_error",
            f"{first['field']}: {first['message']}",
            field=first["field"],
            details=details,
        ),
        status_code=422,
    )


async def _on_api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc)


async def _on_validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return _validation_response(exc)


def _body_decode_failure(exc: StarletteHTTPException) -> str | None:
    """Why the JSON body could not be decoded, when that is what FastAPI's bare 400 ("There was
    an error parsing the body") is about; None for any other error."""
    cause = exc.__cause__
    if exc.status_code != 400 or cause is None:
        return None
    if isinstance(cause, UnicodeDecodeError):
        return f"it is not valid UTF-8 (byte {cause.start})"
    if isinstance(cause, RecursionError):
        return "it is nested too deeply"
    if isinstance(cause, ValueError):  # e.g. a number over Python's integer digit limit
        return f"a number or value cannot be read ({str(cause).split(':', 1)[0][:120]})"
    return None


async def _on_http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if (reason := _body_decode_failure(exc)) is not None:
        return JSONResponse(
            error_body("invalid_json", f"request body is not valid JSON: {reason}", field="body"),
            status_code=400,
        )
    return JSONResponse(
        error_body(_CODES.get(exc.status_code, "error"), str(exc.detail)),
        status_code=exc.status_code,
        headers=exc.headers,
    )


async def _on_not_found(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, NotFoundError)
    return error_response(ApiError(404, exc.message, field=exc.field))


async def _on_conflict(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ConflictError)
    return error_response(ApiError(409, exc.message))


async def _on_forbidden(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ForbiddenError)
    return error_response(ApiError(403, exc.message, code=exc.code, field=exc.field))


async def _on_session_busy(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, SessionBusyError)
    body = error_body("session_busy", exc.message, extra={"runId": str(exc.run_id)})
    return JSONResponse(body, status_code=409)


async def _on_lane_contended(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, LaneContendedError)
    message = "the session's runs stayed locked by workers; try again"
    return JSONResponse(
        error_body("session_contended", message), status_code=503, headers={"Retry-After": "1"}
    )


async def _on_quota_exceeded(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, QuotaExceededError)
    details = {"limit": exc.limit, "value": exc.value, "used": exc.used}
    return JSONResponse(
        error_body("quota_exceeded", exc.message, extra={"details": details}),
        status_code=429,
        headers={"Retry-After": str(exc.retry_after)},
    )


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error(
        "unhandled error",
        method=request.method,
        path=request.url.path,
        exc_info=(type(exc), exc, exc.__traceback__),
    )
    return JSONResponse(error_body("internal_error", "internal server error"), status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    """Register every handler on `app`."""
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(NotFoundError, _on_not_found)
    app.add_exception_handler(ConflictError, _on_conflict)
    app.add_exception_handler(ForbiddenError, _on_forbidden)
    app.add_exception_handler(SessionBusyError, _on_session_busy)
    app.add_exception_handler(LaneContendedError, _on_lane_contended)
    app.add_exception_handler(QuotaExceededError, _on_quota_exceeded)
    app.add_exception_handler(Exception, _on_unexpected)
