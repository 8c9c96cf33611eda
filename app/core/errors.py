"""The errors several layers raise and catch: a lost lease, and the API-facing not found and
conflict and forbidden (rendered as 404, 409 and 403 by `app.api.errors`)."""

from __future__ import annotations


class LeaseLostError(RuntimeError):
    """This worker no longer holds the run (lease expired and taken over, or run finished)."""


class NotFoundError(LookupError):
    """The referenced object does not exist for this tenant (rendered as 404)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class ForbiddenError(PermissionError):
    """The caller's role (or relation to the object) does not allow this (rendered as 403 with
    `code`, e.g. `forbidden_role`, `read_only_session`)."""

    def __init__(self, message: str, *, code: str = "forbidden", field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.field = field


class ConflictError(RuntimeError):
    """The request is valid but conflicts with the object's state (rendered as 409)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SessionBusyError(ConflictError):
    """A message posted with `ifBusy=reject` to a session with a live run (rendered as 409
    `session_busy`, naming the run)."""

    def __init__(self, session_key: str, run_id: object, status: str) -> None:
        super().__init__(f"session {session_key!r} is busy: run {run_id} is {status}")
        self.session_key = session_key
        self.run_id = run_id
        self.status = status


class QuotaExceededError(RuntimeError):
    """A post over one of the tenant's quotas (rendered as 429 `quota_exceeded` with
    `Retry-After`): `limit` names it, `value` is the limit, `used` what counts against it now."""

    def __init__(self, limit: str, value: int, used: int, retry_after: int) -> None:
        super().__init__(f"quota exceeded: {limit} is {value} and {used} are used")
        self.limit = limit
        self.value = value
        self.used = used
        self.retry_after = retry_after
        self.message = str(self)
