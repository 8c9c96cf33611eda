"""A Supabase project's signing keys (its JWKS): fetched without blocking, cached, refetched sparingly.

* Keys are used for `cache_seconds` after a successful fetch, then refetched on the next lookup.
* A `kid` not in the cache triggers one refetch (a key rotated in since the last fetch), but
  fetches — of any cause — are at least `min_refetch_seconds` apart: a flood of made-up `kid`s
  costs the JWKS endpoint one request per interval, not one per token.
* Concurrent lookups that need a fetch share one (a single in-flight task).
* When a fetch fails (endpoint down, bad answer, timeout), the keys already cached keep working;
  a `kid` that only a fetch could resolve raises `JwksUnavailable` (the API answers 503).
* Each key's algorithm is pinned from the JWK itself (`alg`, else `kty`/`crv`), and only
  asymmetric verification keys are kept: a symmetric (`oct`) or private key is never used.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
import structlog

log = structlog.get_logger(__name__)

DEFAULT_TIMEOUT_SECONDS = 5.0
MAX_JWKS_BYTES = 256 * 1024
MAX_KID_CHARS = 256

KEY_TYPES: Mapping[str, tuple[str, str | None]] = {
    "ES256": ("EC", "P-256"),
    "RS256": ("RSA", None),
    "EdDSA": ("OKP", "Ed25519"),
}
"""Accepted algorithms and the key type (and curve) each must have: what Supabase issues."""


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A public key from the JWKS and the one algorithm tokens signed with it may use."""

    kid: str
    algorithm: str
    key: Any  # a `cryptography` public key


class JwksUnavailable(Exception):
    """The signing keys cannot be fetched now, and the cache does not have the one needed."""


def parse_jwk(jwk: Mapping[str, Any]) -> SigningKey:
    """A usable signing key from one JWK; `ValueError` says why a JWK is not one."""
    kid, kty = jwk.get("kid"), jwk.get("kty")
    if not isinstance(kid, str) or not kid or len(kid) > MAX_KID_CHARS:
        raise ValueError("no usable 'kid'")
    if "d" in jwk or kty == "oct":
        raise ValueError(f"key {kid!r} is not a public key")
    if jwk.get("use", "sig") != "sig":
        raise ValueError(f"key {kid!r} is not for signatures")
    ops = jwk.get("key_ops")
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        raise ValueError(f"key {kid!r} is not for verification")
    algorithm = jwk.get("alg") or _infer_algorithm(jwk)
    if not isinstance(algorithm, str) or algorithm not in KEY_TYPES:
        raise ValueError(f"key {kid!r} has an unsupported algorithm {algorithm!r}")
    want_kty, want_crv = KEY_TYPES[algorithm]
    if kty != want_kty or (want_crv is not None and jwk.get("crv") != want_crv):
        raise ValueError(f"key {kid!r} ({kty}) does not match its algorithm {algorithm}")
    try:
        key = jwt.PyJWK(dict(jwk), algorithm=algorithm).key
    except (jwt.PyJWKError, jwt.InvalidKeyError) as exc:
        raise ValueError(f"key {kid!r} cannot be read: {exc}") from exc
    return SigningKey(kid=kid, algorithm=algorithm, key=key)


def _infer_algorithm(jwk: Mapping[str, Any]) -> str | None:
    kty, crv = jwk.get("kty"), jwk.get("crv")
    for algorithm, (key_type, curve) in KEY_TYPES.items():
        if kty == key_type and (curve is None or crv == curve):
            return algorithm
    return None


def parse_jwks(document: object) -> dict[str, SigningKey]:
    """The usable keys of a JWKS document by `kid` (unusable ones are logged and skipped)."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError("not a JWKS (no 'keys' list)")
    keys: dict[str, SigningKey] = {}
    for jwk in document["keys"]:
        try:
            if not isinstance(jwk, dict):
                raise ValueError("a key is not an object")
            key = parse_jwk(jwk)
        except ValueError as exc:
            log.warning("JWKS key skipped", reason=str(exc))
            continue
        keys[key.kid] = key
    return keys


class JwksCache:
    """The signing keys published at `url`, looked up by `kid` (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        cache_seconds: float = 600.0,
        min_refetch_seconds: float = 30.0,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url
        self.cache_seconds = cache_seconds
        self.min_refetch_seconds = min_refetch_seconds
        self.timeout_seconds = timeout_seconds
        self._clock = clock
        self._transport = transport
        self._keys: dict[str, SigningKey] = {}
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self._error: str | None = None  # why the latest fetch failed; None after a success
        self._inflight: asyncio.Task[None] | None = None
        self.fetches = 0
        """Fetch attempts so far (logs, tests)."""

    async def get(self, kid: str) -> SigningKey | None:
        """The key `kid`, or None when the JWKS (fetched now if due) does not have it.

        Raises `JwksUnavailable` when the key is not cached and the JWKS cannot be fetched.
        """
        now = self._clock()
        fresh = self._fetched_at is not None and now - self._fetched_at < self.cache_seconds
        if fresh and kid in self._keys:
            return self._keys[kid]
        task = self._inflight
        if task is None and self._may_fetch(now):
            task = self._inflight = asyncio.create_task(self._refresh(), name="jwks-fetch")
        if task is not None:
            await asyncio.shield(task)  # a caller that goes away does not cancel the others' fetch
        key = self._keys.get(kid)  # after a failed fetch: the stale cache still serves
        if key is None and self._error is not None:
            raise JwksUnavailable(f"the signing keys cannot be fetched ({self._error})")
        return key

    def _may_fetch(self, now: float) -> bool:
        return self._attempted_at is None or now - self._attempted_at >= self.min_refetch_seconds

    async def _refresh(self) -> None:
        self._attempted_at = self._clock()
        self.fetches += 1
        try:
            keys = await self._fetch()
        except (httpx.HTTPError, TimeoutError, ValueError) as exc:
            self._error = str(exc) or type(exc).__name__
            log.warning("JWKS fetch failed", url=self.url, error=self._error)
            return
        finally:
            self._inflight = None
        self._keys, self._fetched_at, self._error = keys, self._clock(), None
        log.info("JWKS fetched", url=self.url, kids=sorted(keys))

    async def _fetch(self) -> dict[str, SigningKey]:
        async with (
            asyncio.timeout(self.timeout_seconds),
            httpx.AsyncClient(
                timeout=self.timeout_seconds, transport=self._transport, follow_redirects=False
            ) as client,
        ):
            response = await client.get(self.url, headers={"Accept": "application/json"})
        if response.status_code != 200:
            raise ValueError(f"HTTP {response.status_code} from the JWKS endpoint")
        if len(response.content) > MAX_JWKS_BYTES:
            raise ValueError(f"the JWKS is larger than {MAX_JWKS_BYTES} bytes")
        return parse_jwks(response.json())
