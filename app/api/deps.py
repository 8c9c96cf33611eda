"""Shared route dependencies as `Annotated` aliases: the principal, the queue, the database.

They are `async def` even where they do not await: FastAPI runs a plain `def` dependency in its
thread pool, a hop to another thread and back on every request for a getattr."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated
from uuid import UUID

from fastapi import Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.api.errors import ApiError
from app.api.event_hub import EventHub
from app.auth.jwt import AuthError
from app.auth.principal import Principal
from app.auth.verifier import AuthUnavailableError, TokenVerifier
from app.config import Settings
from app.db.engine import Database
from app.queue.manager import RunQueue
from app.tenants.members import MemberRegistry


@dataclass(frozen=True, slots=True)
class Runtime:
    """What the lifespan creates and routes use (stored as `app.state.runtime`)."""

    settings: Settings
    db: Database
    queue: RunQueue
    hub: EventHub


async def get_runtime(request: Request) -> Runtime:
    """The app's `Runtime` (set by the lifespan)."""
    runtime = getattr(request.app.state, "runtime", None)
    if not isinstance(runtime, Runtime):
        raise RuntimeError("the app's lifespan has not run")
    return runtime


async def get_settings(request: Request) -> Settings:
    """The app's settings (available before the lifespan runs)."""
    settings = request.app.state.settings
    assert isinstance(settings, Settings)
    return settings


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
SettingsDep = Annotated[Settings, Depends(get_settings)]


async def get_queue(runtime: RuntimeDep) -> RunQueue:
    """The run queue."""
    return runtime.queue


async def get_database(runtime: RuntimeDep) -> Database:
    """The database."""
    return runtime.db


async def get_hub(runtime: RuntimeDep) -> EventHub:
    """The SSE wake-up hub."""
    return runtime.hub


QueueDep = Annotated[RunQueue, Depends(get_queue)]
DatabaseDep = Annotated[Database, Depends(get_database)]
HubDep = Annotated[EventHub, Depends(get_hub)]


async def get_verifier(request: Request) -> TokenVerifier:
    """The app's token verifier (built with the app; its JWKS cache lives as long as the app)."""
    verifier = request.app.state.verifier
    assert isinstance(verifier, TokenVerifier)
    return verifier


VerifierDep = Annotated[TokenVerifier, Depends(get_verifier)]

bearer = HTTPBearer(
    auto_error=False,
    bearerFormat="JWT",
    description="A Supabase access token (ES256/RS256 from the project's JWKS, or HS256 with the "
    "legacy secret; `aud` = the configured audience).",
)
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


async def current_principal(
    verifier: VerifierDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """The verified caller; 401 for a missing/invalid token or an unconfigured server, 503 when
    the token's signing keys cannot be fetched."""
    if not verifier.modes:
        raise ApiError(
            401,
            "the server has no JWT secret configured (set SUPABASE_JWT_SECRET or SUPABASE_URL)",
            headers=_CHALLENGE,
        )
    if credentials is None:
        raise ApiError(
            401, "missing bearer token (Authorization: Bearer <jwt>)", headers=_CHALLENGE
        )
    try:
        return await verifier.verify(credentials.credentials)
    except AuthUnavailableError as exc:
        raise ApiError(
            503,
            exc.message,
            code="auth_unavailable",
            headers={"Retry-After": str(math.ceil(exc.retry_after_seconds))},
        ) from exc
    except AuthError as exc:
        raise ApiError(401, exc.message, headers=_CHALLENGE) from exc


async def observed_principal(
    request: Request, principal: Annotated[Principal, Depends(current_principal)]
) -> Principal:
    """The verified caller, recorded in `tenant_members` when its role is new to this process
    (`app.tenants.members`: a role change is audited as `member.role_changed`)."""
    members = getattr(request.app.state, "members", None)
    runtime = getattr(request.app.state, "runtime", None)
    if isinstance(members, MemberRegistry) and isinstance(runtime, Runtime):
        await members.observe(runtime.db, principal)
    return principal


CurrentPrincipal = Annotated[Principal, Depends(observed_principal)]

RunIdQuery = Annotated[
    UUID, Query(alias="runId", description="The run's id (from `POST /api/agent-runtime`).")
]


async def require_json(request: Request) -> None:
    """415 unless a request with a body declares `Content-Type: application/json`."""
    content_type = request.headers.get("content-type", "")
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    ):
        return
    if not content_type and not await request.body():
        return  # no body at all: the body validation reports it as missing
    raise ApiError(
        415,
        f"request body must be JSON (Content-Type: application/json), got {content_type or 'none'!r}",
        field="body",
    )


JsonBody = Annotated[None, Depends(require_json)]


async def admin_principal(principal: CurrentPrincipal) -> Principal:
    """The caller, if they manage the tenant (role `owner` or `admin`); else 403."""
    if not principal.is_admin:
        raise ApiError(
            403,
            f"this needs the tenant role 'admin' or 'owner' (yours is {principal.role!r}; "
            "roles come from the token's app_metadata.role)",
            code="forbidden_role",
        )
    return principal


AdminPrincipal = Annotated[Principal, Depends(admin_principal)]
"""The caller, required to be a tenant admin or owner (403 `forbidden_role` otherwise)."""
