"""Supabase-style JWTs: decode and check claims into a `Principal`; HS256 verify and mint (CLI).

The tenant is `app_metadata.tenant_id` when it is a non-empty string, else the user (`sub`) —
the same rule as the database's `agent_runtime_tenant_id()`, so RLS and the API always agree.
Both ids are at most `MAX_ID_CHARS` characters: a longer one is refused (401) here, before it can
reach a database index that cannot hold it.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, TypeGuard

import jwt
from jwt.warnings import InsecureKeyLengthWarning

from app.auth.principal import TOKEN_ROLES, Principal, Role

ALGORITHM = "HS256"
MIN_SECRET_BYTES = 32  # RFC 7518 §3.2: an HS256 key should be at least as long as the hash
MAX_ID_CHARS = 255
"""Longest user (`sub`) or tenant id accepted. Ids are stored in btree indexes (alone and beside a
session key), whose entries Postgres caps at about 2.7 kB; Supabase's own ids are 36-character
UUIDs."""


class AuthError(Exception):
    """The bearer token is missing, malformed, wrongly signed, expired or for another audience."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def is_weak_secret(secret: str) -> bool:
    """Whether `secret` is shorter than HS256's recommended minimum (checked once at startup)."""
    return len(secret.encode()) < MIN_SECRET_BYTES


def verify_token(token: str, *, secret: str, audience: str, leeway_seconds: float = 0) -> Principal:
    """Verify an HS256 token (signature, `exp`, `aud`, `sub`) and return who it identifies."""
    if not token or not token.strip():
        raise AuthError("missing bearer token")
    # PyJWT warns about short keys on every call; the app warns once at startup instead.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureKeyLengthWarning)
        claims = decode_claims(
            token, secret, algorithm=ALGORITHM, audience=audience, leeway_seconds=leeway_seconds
        )
    return principal_from_claims(claims)


def decode_claims(
    token: str,
    key: Any,
    *,
    algorithm: str,
    audience: str,
    issuer: str | None = None,
    leeway_seconds: float = 0,
) -> dict[str, Any]:
    """The claims of `token` verified with `key` by `algorithm` only (never the header's choice),
    with `sub`, `exp`, `aud` (and `iss` when given) required; every failure is an `AuthError`."""
    required = ["sub", "exp", "aud"] + (["iss"] if issuer is not None else [])
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key,
            algorithms=[algorithm],
            audience=audience,
            issuer=issuer,
            leeway=leeway_seconds,
            options={"require": required},
        )
    except jwt.ExpiredSignatureError as exc:
        raise AuthError("token has expired") from exc
    except jwt.InvalidAudienceError as exc:
        raise AuthError(f"token audience is not {audience!r}") from exc
    except jwt.InvalidIssuerError as exc:
        raise AuthError(f"token issuer is not {issuer!r}") from exc
    except jwt.MissingRequiredClaimError as exc:
        raise AuthError(f"token is missing the {exc.claim!r} claim") from exc
    except jwt.InvalidAlgorithmError as exc:
        raise AuthError(f"token algorithm is not allowed (only {algorithm})") from exc
    except jwt.InvalidSignatureError as exc:
        raise AuthError("token signature is invalid") from exc
    except jwt.DecodeError as exc:
        raise AuthError("token is malformed") from exc
    except jwt.InvalidTokenError as exc:
        raise AuthError(f"token is invalid: {exc}") from exc
    return claims


def principal_from_claims(claims: dict[str, Any]) -> Principal:
    """The principal of verified claims: `sub`, the tenant (app_metadata.tenant_id, else sub) and
    the role (see `role_from_claims`)."""
    sub = claims.get("sub")
    if not _usable_id(sub):
        raise AuthError("token 'sub' claim must be a non-empty string")
    _check_length("sub", sub)
    tenant = sub
    app_metadata = claims.get("app_metadata")
    if isinstance(app_metadata, dict):
        candidate = app_metadata.get("tenant_id")
        if _usable_id(candidate):
            _check_length("app_metadata.tenant_id", candidate)
            tenant = candidate
    return Principal(user_id=sub, tenant_id=tenant, role=role_from_claims(sub, tenant, claims))


def role_from_claims(sub: str, tenant: str, claims: dict[str, Any]) -> Role:
    """The role in `tenant`: `owner` when the tenant is the user's own `sub`; otherwise
    `app_metadata.role` when it is `owner`, `admin` or `member`; otherwise `member`.

    An unknown role (an app's own vocabulary, or `service`, which only the runtime holds) gets the
    least privilege rather than a refusal, so a Supabase project with other uses for the claim
    keeps working.
    """
    if tenant == sub:
        return "owner"
    app_metadata = claims.get("app_metadata")
    role = app_metadata.get("role") if isinstance(app_metadata, dict) else None
    if isinstance(role, str) and role in TOKEN_ROLES:
        return role  # type: ignore[return-value]  # narrowed by TOKEN_ROLES
    return "member"


def _check_length(claim: str, value: str) -> None:
    if len(value) > MAX_ID_CHARS:
        raise AuthError(f"token {claim!r} claim is longer than {MAX_ID_CHARS} characters")


def _usable_id(value: object) -> TypeGuard[str]:
    """A non-blank string Postgres can store (no NUL, no lone surrogates)."""
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def mint_token(
    secret: str,
    *,
    user_id: str,
    tenant_id: str | None = None,
    role: str | None = None,
    ttl_seconds: int = 3600 * 24,
    audience: str = "authenticated",
) -> str:
    """An HS256 token like Supabase issues (`agent-runtime token`, tests)."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": user_id,
        "role": "authenticated",
        "aud": audience,
        "iat": now,
        "exp": now + ttl_seconds,
    }
    app_metadata: dict[str, str] = {}
    if tenant_id is not None:
        app_metadata["tenant_id"] = tenant_id
    if role is not None:
        app_metadata["role"] = role
    if app_metadata:
        claims["app_metadata"] = app_metadata
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureKeyLengthWarning)
        return jwt.encode(claims, secret, algorithm=ALGORITHM)
