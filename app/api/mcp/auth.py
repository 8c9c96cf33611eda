"""Bearer auth in front of `/mcp`: the REST API's JWTs, checked before any MCP message is read.

The app's `TokenVerifier` turns `Authorization: Bearer <jwt>` into a `Principal`; what fails is
answered like the REST API answers it (a JSON error body, `WWW-Authenticate` on a 401, 503
`auth_unavailable` with `Retry-After` when the signing keys cannot be fetched), never reaching
the MCP transport.
"""

from __future__ import annotations

import math

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import Scope

from app.api.errors import error_body
from app.auth.jwt import AuthError
from app.auth.principal import Principal
from app.auth.verifier import AuthUnavailableError, TokenVerifier

CHALLENGE = 'Bearer realm="agent-runtime"'
"""RFC 6750: a request without credentials gets the bare challenge; a bad token adds
`error="invalid_token"`."""


async def authenticate(verifier: TokenVerifier, scope: Scope) -> Principal | JSONResponse:
    """The verified caller of an HTTP request, or the 401/503 that refuses it."""
    if not verifier.modes:
        return _unauthorized(
            "the server has no JWT secret configured (set SUPABASE_JWT_SECRET or SUPABASE_URL)",
            invalid=False,
        )
    header = Headers(scope=scope).get("authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return _unauthorized("missing bearer token (Authorization: Bearer <jwt>)", invalid=False)
    try:
        return await verifier.verify(token)
    except AuthUnavailableError as exc:
        return JSONResponse(
            error_body("auth_unavailable", exc.message),
            status_code=503,
            headers={"Retry-After": str(math.ceil(exc.retry_after_seconds))},
        )
    except AuthError as exc:
        return _unauthorized(exc.message, invalid=True)


def _unauthorized(message: str, *, invalid: bool) -> JSONResponse:
    challenge = CHALLENGE + (', error="invalid_token"' if invalid else "")
    return JSONResponse(
        error_body("unauthorized", message),
        status_code=401,
        headers={"WWW-Authenticate": challenge},
    )
