"""The FastAPI application: lifespan (database, run queue, SSE hub), routes, error handlers."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version

import structlog
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

from app.api.cors import install_cors
from app.api.deps import Runtime
from app.api.errors import install_error_handlers
from app.api.event_hub import EventHub
from app.api.limits import BodySizeLimit
from app.api.mcp.endpoint import install_mcp
from app.api.metrics_port import MetricsPortOnly
from app.api.request_id import RequestId
from app.api.routes import (
    agents,
    approvals,
    audit,
    chat,
    files,
    health,
    http_tools,
    mcp_servers,
    members,
    memory,
    metrics,
    policies,
    provider_keys,
    quotas,
    runs,
    sessions,
    stream,
    stream_tickets,
    subagents,
    tools,
)
from app.api.schemas import ErrorResponse, error_responses
from app.api.workbench import install_workbench
from app.auth.jwt import MIN_SECRET_BYTES, is_weak_secret
from app.auth.verifier import TokenVerifier
from app.config import Settings
from app.db.engine import Database
from app.observability.tracing import tracing_enabled
from app.queue.manager import RunQueue
from app.tenants.members import MemberRegistry
from app.tenants.quotas import QuotaDefaults
from app.tools.sources import ToolSources

log = structlog.get_logger(__name__)

# A maximal message (32,000 characters, each JSON-escaped as up to 12 bytes) fits well within.
MAX_BODY_BYTES = 1 << 20

DESCRIPTION = """\
Multi-tenant agent runs over HTTP. Post a message (`POST /api/agent-runtime`), then follow the
run with Server-Sent Events (`GET /api/agent-runtime/stream`) or poll its status.

Every `/api/agent-runtime` route needs `Authorization: Bearer <Supabase JWT>`; the tenant is the
token's `app_metadata.tenant_id`, else its `sub`. Another tenant's runs and sessions are 404.
Errors are always `{"error": {"code", "message", "field"?, "details"?}}`.
"""


def _version() -> str:
    try:
        return version("agent-runtime")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0.0.0"


def create_app(settings: Settings, *, database: Database | None = None) -> FastAPI:
    """Build the API. `database`: use this one (tests) instead of opening `settings.database_url`."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = database is None
        if database is not None:
            db = database
        elif settings.database_url:
            db = Database(settings.database_url)
        else:
            raise RuntimeError("DATABASE_URL is not set (the CLI resolves it before starting)")
        _log_auth(settings, verifier)
        hub = EventHub(db.url)
        await hub.start()
        app.state.runtime = Runtime(
            settings=settings,
            db=db,
            queue=RunQueue(
                db,
                default_model=settings.default_model,
                max_turns=settings.max_turns,
                collect_window_seconds=settings.collect_window_seconds,
                quotas=QuotaDefaults.from_settings(settings),
            ),
            hub=hub,
        )
        if owned:
            # The startup heap (modules, routes, settings: ~230k objects) never becomes garbage;
            # frozen, the collector's full passes skip it instead of stalling every stream of the
            # process for hundreds of ms (BENCHMARKS.md#streams). Not for a test's shared process.
            gc.freeze()
        try:
            async with mcp.run():  # the MCP transport serves `/mcp` while the runtime exists
                yield
        finally:
            await hub.stop()
            if isinstance(sources := getattr(app.state, "tool_sources", None), ToolSources):
                await sources.aclose()
            if owned:
                await db.dispose()

    app = FastAPI(
        title="agent-runtime",
        version=_version(),
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.settings = settings
    verifier = app.state.verifier = TokenVerifier.from_settings(settings)
    app.add_middleware(BodySizeLimit, max_bytes=MAX_BODY_BYTES, exempt=files.is_upload)
    app.add_middleware(RequestId)
    if settings.metrics_port is not None:
        app.add_middleware(MetricsPortOnly, port=settings.metrics_port)
    install_cors(app, settings)  # last: outermost, so that error answers carry CORS headers
    install_error_handlers(app)
    for module in (
        runs,
        stream,
        stream_tickets,
        chat,
        sessions,
        subagents,
        agents,
        tools,
        policies,
        approvals,
        audit,
        provider_keys,
        http_tools,
        mcp_servers,
        members,
        memory,
        quotas,
        health,
        metrics,
    ):
        _document_body_errors(module.router)
        _document_auth_unavailable(module.router)
        app.include_router(module.router)
    _document_auth_unavailable(files.router)
    app.include_router(files.router)  # raw-byte uploads: documents its own body errors
    app.state.members = MemberRegistry()
    mcp = install_mcp(app, verifier, version=_version(), max_body_bytes=MAX_BODY_BYTES)
    install_workbench(app)  # the page at `/` (not in the OpenAPI document)
    if tracing_enabled():
        # the request's server span (the parent of the runs it enqueues); not for scrapes and
        # probes, and not one span per SSE frame
        FastAPIInstrumentor.instrument_app(
            app, excluded_urls="/metrics,/healthz,/readyz", exclude_spans=["receive", "send"]
        )
    return app


def _log_auth(settings: Settings, verifier: TokenVerifier) -> None:
    """Say which auth modes and CORS origins are active (never a secret)."""
    if not verifier.modes:
        log.warning("no SUPABASE_JWT_SECRET or SUPABASE_URL: every authenticated route answers 401")
        return
    log.info(
        "auth",
        modes=verifier.modes,
        issuer=verifier.issuer,
        jwks_url=verifier.jwks.url if verifier.jwks else None,
        cors_origins=settings.cors_origins,
        cors_localhost=settings.cors_allow_localhost,
    )
    if verifier.secret and is_weak_secret(verifier.secret):
        log.warning("SUPABASE_JWT_SECRET is short for HS256", min_bytes=MIN_SECRET_BYTES)


def _document_auth_unavailable(router: APIRouter) -> None:
    """Every authenticated route (it lists 401) may answer 503 `auth_unavailable` when the token's
    signing keys cannot be fetched (SUPABASE_URL's JWKS down): say so in its OpenAPI entry."""
    entry = {
        "model": ErrorResponse,
        "description": "The token's signing keys cannot be fetched now (`auth_unavailable`; "
        "see `Retry-After`), or the service is not ready.",
    }
    for route in router.routes:
        if isinstance(route, APIRoute) and (401 in route.responses or "401" in route.responses):
            route.responses.setdefault(503, entry)


def _document_body_errors(router: APIRouter) -> None:
    """Every route that reads a JSON body may answer 400 (not JSON), 413 (too large) and 415 (not
    `application/json`): say so in its OpenAPI entry, whatever the route itself lists."""
    for route in router.routes:
        if isinstance(route, APIRoute) and route.body_field is not None:
            for code, entry in error_responses(400, 413, 415).items():
                route.responses.setdefault(code, entry)
