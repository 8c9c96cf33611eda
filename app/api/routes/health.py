"""Liveness (`/healthz`, no database) and readiness (`/readyz`: database up, schema current).

`/readyz` also says which code-execution isolation is active (`sandbox`). Finding out runs a
probe process (`app/tools/sandbox/detect.py`), so it runs in a thread, never on the event loop,
and its answer is cached per app (`SandboxReport`): a working isolation for good, an unusable
one for `SANDBOX_RECHECK_SECONDS` (so installing bubblewrap shows without a restart). A probe
slower than `SANDBOX_WAIT_SECONDS` or one that crashes is reported as mode `unknown`. The report
is informational: it never makes the server not ready.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Literal

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.api.deps import RuntimeDep
from app.api.schemas import ErrorInfo, Health, Readiness
from app.config import Settings
from app.db.migrate import current_revision, head_revision
from app.tools.sandbox.detect import describe_isolation

log = structlog.get_logger(__name__)

router = APIRouter(tags=["health"])

READY_TIMEOUT_SECONDS = 5.0
SANDBOX_WAIT_SECONDS = 3.0
"""How long `/readyz` waits for a running sandbox probe before answering `unknown`."""
SANDBOX_RECHECK_SECONDS = 60.0
"""How long an unavailable isolation is reported before probing again."""


class SandboxReport:
    """The sandbox isolation as `/readyz` reports it: probed in a thread, then cached."""

    def __init__(
        self,
        settings: Settings,
        describe: Callable[[Settings], dict[str, Any]] = describe_isolation,
    ) -> None:
        self.settings = settings
        self.describe = describe
        self._probe: asyncio.Future[dict[str, Any]] | None = None
        self._known: Readiness.SandboxIsolation | None = None
        self._checked_at = 0.0

    async def current(self) -> Readiness.SandboxIsolation:
        """The cached report, or a fresh probe's (shared by concurrent requests)."""
        known = self._known
        if known is not None and (
            known.available or time.monotonic() - self._checked_at < SANDBOX_RECHECK_SECONDS
        ):
            return known
        if self._probe is None:
            self._probe = asyncio.ensure_future(asyncio.to_thread(self.describe, self.settings))
        probe = self._probe
        try:
            found = await asyncio.wait_for(asyncio.shield(probe), SANDBOX_WAIT_SECONDS)
            report = Readiness.SandboxIsolation.model_validate(found)
        except TimeoutError:
            return known or _unknown("the sandbox probe is still running")
        except Exception as exc:  # a broken probe is reported, never a failed readiness check
            log.warning("sandbox probe failed", error=f"{type(exc).__name__}: {exc}")
            report = _unknown(f"the sandbox probe failed: {type(exc).__name__}")
        finally:
            if probe.done() and self._probe is probe:
                self._probe = None
        self._known, self._checked_at = report, time.monotonic()
        return report


def _unknown(reason: str) -> Readiness.SandboxIsolation:
    return Readiness.SandboxIsolation(mode="unknown", available=False, reason=reason)


def sandbox_report(request: Request, settings: Settings) -> SandboxReport:
    """The app's report (created on first use; tests may set `app.state.sandbox_report`)."""
    report = getattr(request.app.state, "sandbox_report", None)
    if not isinstance(report, SandboxReport):
        report = SandboxReport(settings)
        request.app.state.sandbox_report = report
    return report


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is up (does not touch the database)."""
    return Health()


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "Database unreachable or not migrated."}},
)
async def readyz(request: Request, runtime: RuntimeDep) -> Readiness | JSONResponse:
    """Ready to serve: the database answers and is migrated to this code's head revision."""
    expected = _head()
    sandbox = await sandbox_report(request, runtime.settings).current()
    events: Literal["listening", "polling"] = "listening" if runtime.hub.listening else "polling"
    try:
        async with asyncio.timeout(READY_TIMEOUT_SECONDS), runtime.db.owner() as s:
            revision = await current_revision(s)
    except Exception as exc:  # any failure to ask is "unreachable", never a 500
        log.warning("readiness check failed", error=f"{type(exc).__name__}: {exc}")
        return _not_ready(
            Readiness(
                status="not_ready",
                database="unreachable",
                migrations="unknown",
                revision=None,
                expected_revision=expected,
                events=events,
                error=ErrorInfo(code="unavailable", message="database unreachable"),
                sandbox=sandbox,
            )
        )
    if revision != expected:
        missing = revision is None
        return _not_ready(
            Readiness(
                status="not_ready",
                database="ok",
                migrations="missing" if missing else "outdated",
                revision=revision,
                expected_revision=expected,
                events=events,
                error=ErrorInfo(
                    code="unavailable",
                    message=(
                        "database is not migrated (run `agent-runtime migrate`)"
                        if missing
                        else f"database is at revision {revision}, the code expects {expected}"
                    ),
                ),
                sandbox=sandbox,
            )
        )
    return Readiness(
        status="ready",
        database="ok",
        migrations="current",
        revision=revision,
        expected_revision=expected,
        events=events,
        sandbox=sandbox,
    )


@lru_cache(maxsize=1)
def _head() -> str | None:
    return head_revision()


def _not_ready(body: Readiness) -> JSONResponse:
    return JSONResponse(body.model_dump(mode="json", by_alias=True), status_code=503)
