"""What a failed provider call means: retry it (`TransientModelError`) or give up (`ModelError`).

Providers translate their SDK's exceptions with these helpers so both classify alike:

| failure | outcome | code |
|---|---|---|
| HTTP 429 | retried, honouring `Retry-After` | `model_rate_limited` once retries run out |
| HTTP 408, 5xx (not 501), connection refused/reset, timeouts, a stream cut short | retried | `model_unavailable_transient` once retries run out |
| HTTP 400/422 saying the input is too long, HTTP 413 | at once | `model_context_too_long` |
| other HTTP 400/422 (and other 4xx) | at once | `model_bad_request` |
| HTTP 401, 403, an invalid API key; Vertex AI credentials missing or refused | at once | `model_auth_failed` |
| HTTP 404 | at once | `model_not_found` |
| a blocked prompt or answer (provider safety filters) | at once | `model_safety_block` |

Messages carry the provider's own reason. They never contain API keys: providers send keys in
headers, not URLs, and `scrub` removes them from any text as a second line of defence.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from email.utils import parsedate_to_datetime

from app.llm.base import ModelError

BAD_REQUEST = "model_bad_request"
AUTH_FAILED = "model_auth_failed"
NOT_FOUND = "model_not_found"
SAFETY_BLOCK = "model_safety_block"
CONTEXT_TOO_LONG = "model_context_too_long"
RATE_LIMITED = "model_rate_limited"
UNAVAILABLE_TRANSIENT = "model_unavailable_transient"
MODEL_ERROR = "model_error"

_CONTEXT_TOO_LONG = re.compile(
    r"context.length|maximum context|context window|too many tokens|prompt is too long"
    r"|exceeds the maximum number of tokens|input token count|maximum model length",
    re.IGNORECASE,
)
_BAD_KEY = re.compile(r"API[ _]?key not valid|API_KEY_INVALID|invalid api key", re.IGNORECASE)
# Exception classes (by name, anywhere in the MRO) that mean "the network failed, try again".
# By name because the SDKs use httpx or its fork httpx2, whose classes are unrelated types.
_NETWORK_ERRORS = frozenset({"TimeoutException", "NetworkError", "RemoteProtocolError"})


class TransientModelError(Exception):
    """A failure that may pass: the call is retried; `code` is used once retries run out."""

    def __init__(self, code: str, reason: str, *, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.retry_after = retry_after
        """Seconds the provider asked us to wait (`Retry-After`), if it said."""


def http_failure(
    provider: str, status: int, reason: str, *, retry_after: float | None = None
) -> ModelError | TransientModelError:
    """The meaning of an HTTP error status from `provider`, with its `reason` text."""
    what = f"{provider} HTTP {status}: {reason}"
    if status == 429:
        return TransientModelError(RATE_LIMITED, what, retry_after=retry_after)
    if status == 408 or (status >= 500 and status != 501):
        return TransientModelError(UNAVAILABLE_TRANSIENT, what, retry_after=retry_after)
    if status in (401, 403) or _BAD_KEY.search(reason):
        return ModelError(AUTH_FAILED, what)
    if status == 404:
        return ModelError(NOT_FOUND, what)
    if status == 413 or (status in (400, 422) and _CONTEXT_TOO_LONG.search(reason)):
        return ModelError(CONTEXT_TOO_LONG, what)
    return ModelError(BAD_REQUEST if 400 <= status < 500 else MODEL_ERROR, what)


def network_failure(provider: str, exc: BaseException) -> TransientModelError | None:
    """A transient failure if `exc` is a timeout or a broken/refused connection, else None."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if isinstance(exc, ConnectionError | TimeoutError) or names & _NETWORK_ERRORS:
        return connection_failure(provider, exc)
    return None


def connection_failure(provider: str, exc: BaseException) -> TransientModelError:
    """A transient failure for a timeout or broken connection `exc` (and what caused it)."""
    detail = str(exc) or type(exc).__name__
    cause = exc.__cause__ or exc.__context__
    if cause is not None and str(cause) and str(cause) not in detail:
        detail = f"{detail} ({cause})"
    return TransientModelError(UNAVAILABLE_TRANSIENT, f"{provider}: {detail}")


def unexpected_failure(provider: str, exc: BaseException) -> ModelError:
    """Anything else: a permanent `model_error` naming the exception."""
    return ModelError(MODEL_ERROR, f"{provider}: unexpected {type(exc).__name__}: {exc}")


def stream_cut_short(provider: str) -> TransientModelError:
    """The stream ended without the model saying it had finished."""
    return TransientModelError(
        UNAVAILABLE_TRANSIENT, f"{provider}: the stream ended before the model finished"
    )


def parse_retry_after(
    headers: Mapping[str, str] | None, *, now: float | None = None
) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `Retry-After` (seconds or an HTTP date)."""
    if not headers:
        return None
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with every (non-trivial) secret replaced by `***`."""
    for secret in secrets:
        if secret and len(secret) >= 8:
            text = text.replace(secret, "***")
    return text
