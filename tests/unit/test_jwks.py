"""The JWKS cache against a local JWKS server: caching, rotation, rate limit, shared fetches,
an endpoint that is down, and which JWKs are refused as keys."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.auth.jwks import JwksCache, JwksUnavailable, parse_jwk, parse_jwks
from tests.fakes.jwks import JwksServer, TestKey

pytestmark = pytest.mark.timeout(30)


class Clock:
    """A hand-moved monotonic clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def es_key() -> TestKey:
    return TestKey.generate("ES256")


@pytest.fixture(scope="module")
def rs_key() -> TestKey:
    return TestKey.generate("RS256")


@pytest.fixture
async def server(es_key: TestKey, rs_key: TestKey) -> AsyncIterator[JwksServer]:
    async with JwksServer([es_key, rs_key]) as server:
        yield server


def cache_of(server: JwksServer, clock: Clock, **kwargs: Any) -> JwksCache:
    kwargs.setdefault("cache_seconds", 600)
    kwargs.setdefault("min_refetch_seconds", 30)
    return JwksCache(server.jwks_url, clock=clock, timeout_seconds=2, **kwargs)


async def test_keys_are_fetched_once_and_cached(
    server: JwksServer, es_key: TestKey, rs_key: TestKey
) -> None:
    clock = Clock()
    cache = cache_of(server, clock)
    es = await cache.get(es_key.kid)
    rs = await cache.get(rs_key.kid)
    assert es is not None and es.algorithm == "ES256"
    assert rs is not None and rs.algorithm == "RS256"
    clock.now += 599
    assert await cache.get(es_key.kid) is es
    assert server.requests == 1 and cache.fetches == 1


async def test_cache_expiry_refetches(server: JwksServer, es_key: TestKey) -> None:
    clock = Clock()
    cache = cache_of(server, clock, cache_seconds=60)
    await cache.get(es_key.kid)
    clock.now += 61
    await cache.get(es_key.kid)
    assert server.requests == 2


async def test_rotation_overlap_then_old_key_dropped(
    server: JwksServer, es_key: TestKey, rs_key: TestKey
) -> None:
    clock = Clock()
    cache = cache_of(server, clock, cache_seconds=300, min_refetch_seconds=30)
    server.publish(es_key)
    assert await cache.get(es_key.kid) is not None
    new = TestKey.generate("ES256")
    server.publish(es_key, new)  # rotation starts: both keys published
    clock.now += 31
    assert await cache.get(new.kid) is not None  # unknown kid: one refetch finds it
    assert await cache.get(es_key.kid) is not None  # the old key still works in the overlap
    assert server.requests == 2
    server.publish(new)  # the old key is revoked
    assert await cache.get(es_key.kid) is not None  # still cached until the cache expires
    clock.now += 300
    assert await cache.get(es_key.kid) is None  # expired: refetched, and it is gone
    assert await cache.get(new.kid) is not None
    assert server.requests == 3


async def test_unknown_kid_floods_are_rate_limited(server: JwksServer, es_key: TestKey) -> None:
    clock = Clock()
    cache = cache_of(server, clock, min_refetch_seconds=30)
    assert await cache.get(es_key.kid) is not None
    for _ in range(50):
        assert await cache.get(uuid.uuid4().hex) is None
    assert server.requests == 1  # the first fetch was under 30 s ago: no refetch at all
    clock.now += 30
    results = await asyncio.gather(*(cache.get(uuid.uuid4().hex) for _ in range(50)))
    assert results == [None] * 50
    assert server.requests == 2  # one refetch for the whole flood
    for _ in range(20):
        clock.now += 1
        assert await cache.get(uuid.uuid4().hex) is None
    assert server.requests == 2


async def test_concurrent_lookups_share_one_fetch(server: JwksServer, es_key: TestKey) -> None:
    server.delay = 0.2
    cache = cache_of(server, Clock())
    keys = await asyncio.gather(*(cache.get(es_key.kid) for _ in range(20)))
    assert all(k is not None and k.kid == es_key.kid for k in keys)
    assert server.requests == 1


async def test_cancelled_caller_does_not_cancel_the_shared_fetch(
    server: JwksServer, es_key: TestKey
) -> None:
    server.delay = 0.3
    cache = cache_of(server, Clock())
    first = asyncio.create_task(cache.get(es_key.kid))
    second = asyncio.create_task(cache.get(es_key.kid))
    await asyncio.sleep(0.1)
    first.cancel()
    assert (await second) is not None
    assert server.requests == 1


async def test_endpoint_down_before_any_fetch_is_unavailable(
    server: JwksServer, es_key: TestKey
) -> None:
    server.down = True
    clock = Clock()
    cache = cache_of(server, clock)
    with pytest.raises(JwksUnavailable, match="HTTP 503"):
        await cache.get(es_key.kid)
    for _ in range(10):  # failures are rate-limited too
        with pytest.raises(JwksUnavailable):
            await cache.get(uuid.uuid4().hex)
    assert server.requests == 1
    server.down = False
    clock.now += 30
    assert await cache.get(es_key.kid) is not None  # back: fetched again after the interval


async def test_cached_keys_keep_working_while_endpoint_is_down(
    server: JwksServer, es_key: TestKey
) -> None:
    clock = Clock()
    cache = cache_of(server, clock, cache_seconds=60)
    assert await cache.get(es_key.kid) is not None
    server.down = True
    clock.now += 120  # expired: the refetch fails, the stale key still serves
    assert await cache.get(es_key.kid) is not None
    with pytest.raises(JwksUnavailable):
        await cache.get("rotated-in-while-down")
    assert server.requests == 2


async def test_unreachable_and_hanging_endpoints_are_unavailable_quickly() -> None:
    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(10)
        writer.close()

    hanging = await asyncio.start_server(hang, "127.0.0.1", 0)
    port = hanging.sockets[0].getsockname()[1]
    try:
        cache = JwksCache(f"http://127.0.0.1:{port}/jwks", timeout_seconds=0.3)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(JwksUnavailable):
            await cache.get("k")
        assert loop.time() - started < 2
    finally:
        hanging.close()
    closed = JwksCache(f"http://127.0.0.1:{port}/jwks", timeout_seconds=0.3)
    with pytest.raises(JwksUnavailable):
        await closed.get("k")


@pytest.mark.parametrize("body", [b"not json", b'{"nokeys": []}', b'["a"]'])
async def test_bad_documents_are_unavailable(body: bytes) -> None:
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
            % (len(body), body)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(reply, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(JwksUnavailable):
            await JwksCache(f"http://127.0.0.1:{port}/jwks").get("k")
    finally:
        server.close()


# ------------------------------------------------------------------ which JWKs are keys


@pytest.mark.parametrize("algorithm", ["ES256", "RS256", "EdDSA"])
def test_each_algorithm_with_and_without_alg(algorithm: str) -> None:
    key = TestKey.generate(algorithm)
    for jwk in (key.public_jwk(), key.public_jwk(with_alg=False)):
        parsed = parse_jwk(jwk)
        assert (parsed.kid, parsed.algorithm) == (key.kid, algorithm)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"alg": "HS256"}, "unsupported algorithm"),
        ({"alg": "RS256"}, "does not match"),  # an EC key claiming RSA
        ({"alg": "none"}, "unsupported algorithm"),
        ({"crv": "P-384", "alg": "ES256"}, "does not match"),
        ({"kty": "oct", "k": "c2VjcmV0"}, "not a public key"),
        ({"d": "x"}, "not a public key"),
        ({"use": "enc"}, "not for signatures"),
        ({"key_ops": ["sign"]}, "not for verification"),
        ({"kid": ""}, "kid"),
        ({"kid": 7}, "kid"),
    ],
)
def test_unusable_jwks_are_refused(es_key: TestKey, overrides: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_jwk(es_key.public_jwk(**overrides))


def test_a_jwks_keeps_only_usable_keys(es_key: TestKey, rs_key: TestKey) -> None:
    document = {
        "keys": [
            es_key.public_jwk(),
            {"kty": "oct", "kid": "legacy", "k": "c2VjcmV0", "alg": "HS256"},
            "garbage",
            rs_key.public_jwk(),
        ]
    }
    assert set(parse_jwks(document)) == {es_key.kid, rs_key.kid}
    assert parse_jwks({"keys": []}) == {}
