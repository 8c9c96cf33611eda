"""Supabase's asymmetric tokens through the real HTTP app, against a local JWKS server: ES256 and
RS256, the legacy HS256 secret beside them, rotation, attacks, a JWKS endpoint that is down (503,
cached keys still work) and a flood of made-up `kid`s (rate-limited)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.db.engine import Database
from tests.fakes.jwks import JwksServer, TestKey, supabase_claims
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api

pytestmark = pytest.mark.timeout(60)

SESSIONS = "/api/agent-runtime/sessions"


@pytest.fixture(scope="module")
def keys() -> dict[str, TestKey]:
    return {alg: TestKey.generate(alg) for alg in ("ES256", "RS256")}


@pytest.fixture
async def jwks(keys: dict[str, TestKey]) -> AsyncIterator[JwksServer]:
    async with JwksServer(list(keys.values())) as server:
        yield server


@contextlib.asynccontextmanager
async def jwks_api(
    database: Database, db_url: str, server: JwksServer, **overrides: Any
) -> AsyncIterator[Api]:
    settings = make_settings(db_url, supabase_url=server.url, **overrides)
    async with running_api(settings, database) as api:
        yield api


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def signed(key: TestKey, server: JwksServer, **claims: Any) -> dict[str, str]:
    return bearer(key.sign(supabase_claims(server.issuer, **claims)))


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


async def test_es256_rs256_and_legacy_hs256_tokens_all_work(
    database: Database, db_url: str, jwks: JwksServer, keys: dict[str, TestKey]
) -> None:
    async with jwks_api(database, db_url, jwks) as api:
        r = await api.client.post(
            "/api/agent-runtime", json={"message": "hi"}, headers=signed(keys["ES256"], jwks)
        )
        assert r.status_code == 202, r.text
        session = r.json()["sessionKey"]
        for headers in (signed(keys["RS256"], jwks), auth("alice", tenant="acme")):
            r = await api.client.get(SESSIONS, headers=headers)
            assert r.status_code == 200, r.text
            assert session in json.dumps(r.json())  # same tenant, whichever key signed
        other = signed(keys["ES256"], jwks, sub="mallory", app_metadata={"tenant_id": "evil"})
        r = await api.client.get(SESSIONS, headers=other)
        assert r.status_code == 200 and session not in json.dumps(r.json())
        assert jwks.requests == 1


async def test_jwks_only_server_refuses_hs256(
    database: Database, db_url: str, jwks: JwksServer, keys: dict[str, TestKey]
) -> None:
    async with jwks_api(database, db_url, jwks, supabase_jwt_secret=None) as api:
        assert (
            await api.client.get(SESSIONS, headers=signed(keys["RS256"], jwks))
        ).status_code == 200
        r = await api.client.get(SESSIONS, headers=auth())
        assert r.status_code == 401 and "HS256 tokens are not accepted" in error_of(r)["message"]


async def test_attacks_are_401(
    database: Database, db_url: str, jwks: JwksServer, keys: dict[str, TestKey]
) -> None:
    es, rs = keys["ES256"], keys["RS256"]
    claims = supabase_claims(jwks.issuer)
    payload = b64(json.dumps(claims).encode())
    none_token = f"{b64(json.dumps({'alg': 'none', 'kid': es.kid}).encode())}.{payload}."
    hs_input = f"{b64(json.dumps({'alg': 'HS256', 'kid': rs.kid}).encode())}.{payload}"
    hs_with_public_key = (
        f"{hs_input}.{b64(hmac.new(rs.public_pem(), hs_input.encode(), hashlib.sha256).digest())}"
    )
    stranger = TestKey.generate("ES256")
    attacks = {
        "alg-none": bearer(none_token),
        "hs256-with-public-key": bearer(hs_with_public_key),
        "alg-disagrees-with-key": bearer(rs.sign(claims, kid=es.kid)),
        "unknown-key": bearer(stranger.sign(claims)),
        "other-key-under-known-kid": bearer(stranger.sign(claims, kid=es.kid)),
        "wrong-issuer": signed(es, jwks, iss="https://evil.example/auth/v1"),
        "wrong-audience": signed(es, jwks, aud="anon"),
        "expired": signed(es, jwks, exp=1_000_000),
    }
    async with jwks_api(database, db_url, jwks) as api:
        for name, headers in attacks.items():
            r = await api.client.get(SESSIONS, headers=headers)
            assert r.status_code == 401, (name, r.text)
            assert error_of(r)["code"] == "unauthorized", name
            assert r.headers["www-authenticate"] == "Bearer", name


async def test_key_rotation(
    database: Database, db_url: str, jwks: JwksServer, keys: dict[str, TestKey]
) -> None:
    old, new = keys["ES256"], TestKey.generate("ES256")
    jwks.publish(old)
    overrides = {"supabase_jwks_cache_seconds": 0.6, "supabase_jwks_min_refetch_seconds": 0.1}
    async with jwks_api(database, db_url, jwks, **overrides) as api:
        assert (await api.client.get(SESSIONS, headers=signed(old, jwks))).status_code == 200
        jwks.publish(old, new)  # the overlap: both keys valid
        await asyncio.sleep(0.15)
        assert (await api.client.get(SESSIONS, headers=signed(new, jwks))).status_code == 200
        assert (await api.client.get(SESSIONS, headers=signed(old, jwks))).status_code == 200
        jwks.publish(new)  # the old key is revoked
        await asyncio.sleep(0.7)  # the cache expires
        r = await api.client.get(SESSIONS, headers=signed(old, jwks))
        assert r.status_code == 401 and "unknown key" in error_of(r)["message"]
        assert (await api.client.get(SESSIONS, headers=signed(new, jwks))).status_code == 200


async def test_jwks_down_is_503_and_never_an_accept(
    database: Database, db_url: str, jwks: JwksServer, keys: dict[str, TestKey]
) -> None:
    jwks.down = True
    async with jwks_api(database, db_url, jwks) as api:
        r = await api.client.get(SESSIONS, headers=signed(keys["ES256"], jwks))
        assert r.status_code == 503, r.text
        error = error_of(r)
        assert error["code"] == "auth_unavailable" and "signing keys" in error["message"]
        assert int(r.headers["retry-after"]) >= 1
        # the legacy secret does not need the JWKS
        assert (await api.client.get(SESSIONS, headers=auth())).status_code == 200
        # bad tokens are still 401 without asking the JWKS
        assert (await api.client.get(SESSIONS, headers=bearer("garbage"))).status_code == 401


async def test_cached_keys_keep_working_while_jwks_is_down(
    database: Database, db_url: str, jwks: JwksServer, keys: dict[str, TestKey]
) -> None:
    es, rs = keys["ES256"], keys["RS256"]
    jwks.publish(es)
    overrides = {"supabase_jwks_cache_seconds": 0.3, "supabase_jwks_min_refetch_seconds": 0}
    async with jwks_api(database, db_url, jwks, **overrides) as api:
        assert (await api.client.get(SESSIONS, headers=signed(es, jwks))).status_code == 200
        jwks.down = True
        await asyncio.sleep(0.4)  # expired, and the refetch fails
        assert (await api.client.get(SESSIONS, headers=signed(es, jwks))).status_code == 200
        r = await api.client.get(SESSIONS, headers=signed(rs, jwks))  # only a fetch could tell
        assert r.status_code == 503 and error_of(r)["code"] == "auth_unavailable"
        jwks.down = False
        jwks.publish(es, rs)
        assert (await api.client.get(SESSIONS, headers=signed(rs, jwks))).status_code == 200


async def test_a_flood_of_made_up_kids_does_not_hammer_the_jwks(
    database: Database, db_url: str, jwks: JwksServer, keys: dict[str, TestKey]
) -> None:
    stranger = TestKey.generate("ES256")
    claims = supabase_claims(jwks.issuer)
    async with jwks_api(database, db_url, jwks) as api:  # default: one refetch per 30 s at most
        assert (
            await api.client.get(SESSIONS, headers=signed(keys["ES256"], jwks))
        ).status_code == 200
        flood = [bearer(stranger.sign(claims, kid=f"kid-{i}")) for i in range(200)]
        answers = await asyncio.gather(*(api.client.get(SESSIONS, headers=h) for h in flood))
        assert {r.status_code for r in answers} == {401}
        assert jwks.requests == 1


async def test_concurrent_first_requests_share_one_fetch(
    database: Database, db_url: str, jwks: JwksServer, keys: dict[str, TestKey]
) -> None:
    jwks.delay = 0.2
    async with jwks_api(database, db_url, jwks) as api:
        headers = signed(keys["RS256"], jwks)
        answers = await asyncio.gather(
            *(api.client.get(SESSIONS, headers=headers) for _ in range(20))
        )
        assert {r.status_code for r in answers} == {200}
        assert jwks.requests == 1
