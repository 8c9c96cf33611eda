"""The id of the HTTP request being served, for the audit trail and the logs.

Set by the API's request-id middleware (`X-Request-Id`, taken from the client when well formed,
else generated) and read wherever a record of the request is written. Outside a request (the
worker, sweeps) it is None.
"""

from __future__ import annotations

import re
import secrets
from contextvars import ContextVar

REQUEST_ID: ContextVar[str | None] = ContextVar("agent_runtime_request_id", default=None)
"""The current request's id, or None outside a request."""

MAX_REQUEST_ID_CHARS = 128
_WELL_FORMED = re.compile(r"[A-Za-z0-9._:\-]{1,128}")


def accept_request_id(given: str | None) -> str:
    """`given` when it is a sane id (at most 128 of `A-Za-z0-9._:-`), else a fresh one."""
    if given is not None and _WELL_FORMED.fullmatch(given):
        return given
    return f"req_{secrets.token_hex(12)}"


def current_request_id() -> str | None:
    """The current request's id, or None outside a request."""
    return REQUEST_ID.get()
