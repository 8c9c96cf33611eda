"""Which key checks a bearer token: the legacy HS256 secret, or a signing key from the JWKS.

A Supabase project migrating to asymmetric keys has both kinds of token in flight, so both are
accepted when both are configured. The header's `alg` only routes the token; it never picks the
key type: HS256 goes to the secret (and to nothing else), an asymmetric token to the JWKS key
named by its `kid`, verified with that key's own pinned algorithm — a token whose `alg` differs
from its key's is refused, as are `none` and every algorithm not listed here.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import jwt
from jwt.warnings import InsecureKeyLengthWarning

from app.auth.jwks import KEY_TYPES, MAX_KID_CHARS, JwksCache, JwksUnavailable
from app.auth.jwt import ALGORITHM as HS256
from app.auth.jwt import AuthError, decode_claims, principal_from_claims
from app.auth.principal import Principal
from app.config import Settings


class AuthUnavailableError(Exception):
    """The token cannot be checked right now (its signing keys cannot be fetched): a 503."""

    def __init__(self, message: str, *, retry_after_seconds: float) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_seconds = retry_after_seconds


class TokenVerifier:
    """Verifies bearer tokens into a `Principal` with the configured secret and/or JWKS."""

    def __init__(
        self,
        *,
        audience: str,
        secret: str | None = None,
        jwks: JwksCache | None = None,
        issuer: str | None = None,
        leeway_seconds: float = 0,
    ) -> None:
        if jwks is not None and issuer is None:
            raise ValueError("JWKS verification needs the issuer")
        self.audience = audience
        self.secret = secret or None
        self.jwks = jwks
        self.issuer = issuer
        self.leeway_seconds = leeway_seconds

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenVerifier:
        """The verifier `settings` describe (the JWKS is fetched lazily, on first need)."""
        url = settings.jwks_url()
        jwks = (
            JwksCache(
                url,
                cache_seconds=settings.supabase_jwks_cache_seconds,
                min_refetch_seconds=settings.supabase_jwks_min_refetch_seconds,
            )
            if url
            else None
        )
        return cls(
            audience=settings.jwt_audience,
            secret=settings.supabase_jwt_secret,
            jwks=jwks,
            issuer=settings.supabase_issuer(),
            leeway_seconds=settings.jwt_leeway_seconds,
        )

    @property
    def modes(self) -> list[str]:
        """The active modes, for logs: `hs256` (the secret) and/or `jwks` (SUPABASE_URL)."""
        return [m for m, on in (("hs256", self.secret), ("jwks", self.jwks)) if on]

    async def verify(self, token: str) -> Principal:
        """Who `token` identifies. `AuthError`: refused (401); `AuthUnavailableError`: the keys
        it needs cannot be fetched now (503)."""
        if not token or not token.strip():
            raise AuthError("missing bearer token")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise AuthError("token is malformed") from exc
        algorithm = header.get("alg")
        if algorithm == HS256:
            return self._verify_hs256(token)
        if isinstance(algorithm, str) and algorithm in KEY_TYPES:
            return principal_from_claims(await self._verify_asymmetric(token, header, algorithm))
        raise AuthError(f"token algorithm {str(algorithm)[:20]!r} is not allowed")

    def _verify_hs256(self, token: str) -> Principal:
        if self.secret is None:
            raise AuthError("HS256 tokens are not accepted (no SUPABASE_JWT_SECRET configured)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InsecureKeyLengthWarning)
            claims = decode_claims(
                token,
                self.secret,
                algorithm=HS256,
                audience=self.audience,
                leeway_seconds=self.leeway_seconds,
            )
        return principal_from_claims(claims)

    async def _verify_asymmetric(
        self, token: str, header: dict[str, Any], algorithm: str
    ) -> dict[str, Any]:
        if self.jwks is None:
            raise AuthError(f"{algorithm} tokens are not accepted (no SUPABASE_URL configured)")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid or len(kid) > MAX_KID_CHARS:
            raise AuthError("token has no usable 'kid' header")
        try:
            key = await self.jwks.get(kid)
        except JwksUnavailable as exc:
            raise AuthUnavailableError(
                f"cannot verify the token now: {exc}",
                retry_after_seconds=max(1, math.ceil(self.jwks.min_refetch_seconds)),
            ) from exc
        if key is None:
            raise AuthError("token is signed with an unknown key (its 'kid' is not in the JWKS)")
        if key.algorithm != algorithm:
            raise AuthError(
                f"token algorithm {algorithm} does not match its key's ({key.algorithm})"
            )
        assert self.issuer is not None  # checked in __init__
        return decode_claims(
            token,
            key.key,
            algorithm=key.algorithm,
            audience=self.audience,
            issuer=self.issuer,
            leeway_seconds=self.leeway_seconds,
        )
