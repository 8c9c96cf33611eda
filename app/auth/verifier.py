"""Which key checks a bearer token: the legacy HS256 secret, or a signing key from the JWKS.

A Supabase project migrating to asymmetric keys has both kinds of token in flight, so both are
accepted when both are configured. The header's `alg` only routes the token; it never picks the
key type: HS256 goes to the secret (and to nothing else), an asymmetric token to the JWKS key
named by its `kid`, verified with that key's own pinned algorithm — a token whose `alg` differs
from its key's is refused, as are `none` and every algorithm not listed here.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jwt
from jwt.warnings import InsecureKeyLengthWarning

from app.auth.jwks import KEY_TYPES, MAX_KID_CHARS, JwksCache, JwksUnavailable, SigningKey
from app.auth.jwt import ALGORITHM as HS256
from app.auth.jwt import AuthError, decode_claims, principal_from_claims
from app.auth.principal import Principal
from app.config import Settings

VERIFIED_CACHE_SIZE = 1024
"""Tokens remembered as verified (a client sends the same token on every request)."""


@dataclass(frozen=True, slots=True)
class _Verified:
    """A token that passed: who it is, until when (`exp` + leeway), and the JWKS key that checked
    it (None: the secret)."""

    principal: Principal
    valid_until: float
    kid: str | None = None
    key: SigningKey | None = None


class AuthUnavailableError(Exception):
    """The token cannot be checked right now (its signing keys cannot be fetched): a 503."""

    def __init__(self, message: str, *, retry_after_seconds: float) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_seconds = retry_after_seconds


class TokenVerifier:
    """Verifies bearer tokens into a `Principal` with the configured secret and/or JWKS.

    A token that passed is remembered (the last `VERIFIED_CACHE_SIZE`, by its exact text) until
    its `exp` (plus the leeway): the same token again is not decoded and its signature not
    checked again (PyJWT spends about 0.1 ms on it). One checked with a JWKS key is taken from
    memory only while the JWKS still serves that same key object; after a refetch it is checked
    again, so a key removed from the JWKS refuses its tokens as before."""

    def __init__(
        self,
        *,
        audience: str,
        secret: str | None = None,
        jwks: JwksCache | None = None,
        issuer: str | None = None,
        leeway_seconds: float = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if jwks is not None and issuer is None:
            raise ValueError("JWKS verification needs the issuer")
        self.audience = audience
        self.secret = secret or None
        self.jwks = jwks
        self.issuer = issuer
        self.leeway_seconds = leeway_seconds
        self._clock = clock
        self._verified: dict[str, _Verified] = {}

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
        remembered = await self._remembered(token)
        if remembered is not None:
            return remembered
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise AuthError("token is malformed") from exc
        algorithm = header.get("alg")
        if algorithm == HS256:
            claims = self._verify_hs256(token)
            verified = _Verified(principal_from_claims(claims), self._valid_until(claims))
        elif isinstance(algorithm, str) and algorithm in KEY_TYPES:
            claims, kid, key = await self._verify_asymmetric(token, header, algorithm)
            verified = _Verified(principal_from_claims(claims), self._valid_until(claims), kid, key)
        else:
            raise AuthError(f"token algorithm {str(algorithm)[:20]!r} is not allowed")
        self._remember(token, verified)
        return verified.principal

    async def _remembered(self, token: str) -> Principal | None:
        """The principal of a token that passed before and is still valid; None otherwise."""
        verified = self._verified.get(token)
        if verified is None:
            return None
        if self._clock() < verified.valid_until:
            if verified.kid is None:
                return verified.principal
            assert self.jwks is not None  # a JWKS key checked it
            try:
                if await self.jwks.get(verified.kid) is verified.key:
                    return verified.principal
            except JwksUnavailable:
                pass  # checked again below: the same answer as without memory
        self._verified.pop(token, None)
        return None

    def _valid_until(self, claims: dict[str, Any]) -> float:
        """When verified `claims` expire (`exp` is required and checked by `decode_claims`)."""
        return float(claims["exp"]) + self.leeway_seconds

    def _remember(self, token: str, verified: _Verified) -> None:
        if len(self._verified) >= VERIFIED_CACHE_SIZE:
            now = self._clock()
            for old, entry in list(self._verified.items()):
                if entry.valid_until <= now:
                    del self._verified[old]
            if len(self._verified) >= VERIFIED_CACHE_SIZE:  # all live: drop the oldest
                del self._verified[next(iter(self._verified))]
        self._verified[token] = verified

    def _verify_hs256(self, token: str) -> dict[str, Any]:
        if self.secret is None:
            raise AuthError("HS256 tokens are not accepted (no SUPABASE_JWT_SECRET configured)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InsecureKeyLengthWarning)
            return decode_claims(
                token,
                self.secret,
                algorithm=HS256,
                audience=self.audience,
                leeway_seconds=self.leeway_seconds,
            )

    async def _verify_asymmetric(
        self, token: str, header: dict[str, Any], algorithm: str
    ) -> tuple[dict[str, Any], str, SigningKey]:
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
        claims = decode_claims(
            token,
            key.key,
            algorithm=key.algorithm,
            audience=self.audience,
            issuer=self.issuer,
            leeway_seconds=self.leeway_seconds,
        )
        return claims, kid, key
