"""Liveness (`/healthz`, no database) and readiness (`/readyz`: database up, schema current)."""

from __future__ import annotations

import asyncio
from functools import lru_cache
from typing import Literal

import structlog
from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app.api.deps import RuntimeDep
from app.api.schemas import ErrorInfo, Health, Readiness
from app.db.migrate import head_revision

log = structlog.get_logger(__name__)

router = APIRouter(tags=["health"])

READY_TIMEOUT_SECONDS = 5.0


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is up (does not touch the database)."""
    return Health()


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "Database unreachable or not migrated."}},
)
async def readyz(runtime: RuntimeDep) -> Readiness | JSONResponse:
    """Ready to serve: the database answers and is migrated to this code's head revision."""
    expected = _head()
    events: Literal["listening", "polling"] = "listening" if runtime.hub.listening else "polling"
    try:
        async with asyncio.timeout(READY_TIMEOUT_SECONDS), runtime.db.owner() as s:
            has_table = await s.scalar(text("SELECT to_regclass('alembic_version') IS NOT NULL"))
            revision = (
                await s.scalar(text("SELECT version_num FROM alembic_version"))
                if has_table
                else None
            )
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
            )
        )
    return Readiness(
        status="ready",
        database="ok",
        migrations="current",
        revision=revision,
        expected_revision=expected,
        events=events,
    )


@lru_cache(maxsize=1)
def _head() -> str | None:
    return head_revision()


def _not_ready(body: Readiness) -> JSONResponse:
    return JSONResponse(body.model_dump(mode="json", by_alias=True), status_code=503)
