"""TokenVerifier: asymmetric tokens against a local JWKS, the legacy HS256 secret beside it, and
every algorithm-confusion attack refused."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.auth import verifier as verifier_module
from app.auth.jwks import JwksCache
from app.auth.jwt import AuthError, mint_token
from app.auth.principal import Principal
from app.auth.verifier import AuthUnavailableError, TokenVerifier
from app.config import Settings
from tests.fakes.jwks import AUDIENCE, JwksServer, TestKey, supabase_claims

pytestmark = pytest.mark.timeout(30)

SECRET = "verifier-test-secret-0123456789abcdef0123456789"
ACME_ALICE = Principal(user_id="alice", tenant_id="acme")


@pytest.fixture(scope="module")
def keys() -> dict[str, TestKey]:
    return {alg: TestKey.generate(alg) for alg in ("ES256", "RS256", "EdDSA")}


@pytest.fixture
async def server(keys: dict[str, TestKey]) -> AsyncIterator[JwksServer]:
    async with JwksServer(list(keys.values())) as server:
        yield server


def verifier_for(
    server: JwksServer, *, secret: str | None = SECRET, leeway: float = 30, **cache: Any
) -> TokenVerifier:
    return TokenVerifier(
        audience=AUDIENCE,
        secret=secret,
        jwks=JwksCache(server.jwks_url, timeout_seconds=2, **cache),
        issuer=server.issuer,
        leeway_seconds=leeway,
    )


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def unsigned(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"") -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}.{b64(signature)}"


@pytest.mark.parametrize("algorithm", ["ES256", "RS256", "EdDSA"])
async def test_asymmetric_tokens_verify(
    server: JwksServer, keys: dict[str, TestKey], algorithm: str
) -> None:
    token = keys[algorithm].sign(supabase_claims(server.issuer))
    assert await verifier_for(server).verify(token) == ACME_ALICE


async def test_tenant_rule_and_id_limit_are_the_same_as_hs256(
    server: JwksServer, keys: dict[str, TestKey]
) -> None:
    verifier, key = verifier_for(server), keys["ES256"]
    token = key.sign(supabase_claims(server.issuer, sub="bob", app_metadata={"provider": "email"}))
    assert await verifier.verify(token) == Principal(user_id="bob", tenant_id="bob")
    with pytest.raises(AuthError, match="longer than 255"):
        await verifier.verify(key.sign(supabase_claims(server.issuer, sub="u" * 256)))


async def test_legacy_hs256_secret_works_beside_the_jwks(server: JwksServer) -> None:
    verifier = verifier_for(server)
    token = mint_token(SECRET, user_id="alice", tenant_id="acme")
    assert await verifier.verify(token) == ACME_ALICE
    assert server.requests == 0  # HS256 never needs the JWKS
    assert verifier.modes == ["hs256", "jwks"]


async def test_hs256_without_a_secret_is_refused(server: JwksServer) -> None:
    verifier = verifier_for(server, secret=None)
    assert verifier.modes == ["jwks"]
    with pytest.raises(AuthError, match="HS256 tokens are not accepted"):
        await verifier.verify(mint_token(SECRET, user_id="alice"))


async def test_asymmetric_without_supabase_url_is_refused(keys: dict[str, TestKey]) -> None:
    verifier = TokenVerifier(audience=AUDIENCE, secret=SECRET)
    assert verifier.modes == ["hs256"]
    with pytest.raises(AuthError, match="no SUPABASE_URL"):
        await verifier.verify(keys["ES256"].sign(supabase_claims("https://x/auth/v1")))


async def test_leeway_applies_to_exp(server: JwksServer, keys: dict[str, TestKey]) -> None:
    key, now = keys["ES256"], int(time.time())
    slightly = key.sign(supabase_claims(server.issuer, exp=now - 10))
    assert await verifier_for(server, leeway=30).verify(slightly) == ACME_ALICE
    with pytest.raises(AuthError, match="expired"):
        await verifier_for(server, leeway=5).verify(slightly)
    with pytest.raises(AuthError, match="expired"):
        await verifier_for(server).verify(key.sign(supabase_claims(server.issuer, exp=now - 60)))
    old_hs = mint_token(SECRET, user_id="alice", ttl_seconds=-60)
    with pytest.raises(AuthError, match="expired"):
        await verifier_for(server).verify(old_hs)


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"iss": "https://evil.example/auth/v1"}, "issuer"),
        ({"iss": None}, "'iss'"),
        ({"aud": "anon"}, "audience"),
        ({"aud": None}, "'aud'"),
        ({"exp": None}, "'exp'"),
        ({"sub": None}, "'sub'"),
    ],
)
async def test_claims_are_checked(
    server: JwksServer, keys: dict[str, TestKey], claims: dict[str, Any], message: str
) -> None:
    token = keys["RS256"].sign(supabase_claims(server.issuer, **claims))
    with pytest.raises(AuthError, match=message):
        await verifier_for(server).verify(token)


# ------------------------------------------------------------------ attacks


async def test_alg_none_is_refused(server: JwksServer, keys: dict[str, TestKey]) -> None:
    claims = supabase_claims(server.issuer)
    for header in (
        {"alg": "none", "typ": "JWT"},
        {"alg": "none", "kid": keys["ES256"].kid},
        {"alg": "None", "kid": keys["ES256"].kid},
        {"typ": "JWT"},
    ):
        with pytest.raises(AuthError, match="not allowed"):
            await verifier_for(server).verify(unsigned(header, claims))


async def test_hs256_signed_with_the_public_key_is_refused(
    server: JwksServer, keys: dict[str, TestKey]
) -> None:
    """The classic confusion: the public key (PEM, or the JWK's JSON) used as an HMAC secret."""
    key, claims = keys["RS256"], supabase_claims(server.issuer)
    for secret in (key.public_pem(), json.dumps(key.public_jwk()).encode()):
        header = {"alg": "HS256", "typ": "JWT", "kid": key.kid}
        signing_input = unsigned(header, claims).rsplit(".", 1)[0]
        mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
        token = f"{signing_input}.{b64(mac)}"
        with pytest.raises(AuthError, match="signature"):
            await verifier_for(server).verify(token)
        with pytest.raises(AuthError, match="HS256 tokens are not accepted"):
            await verifier_for(server, secret=None).verify(token)


@pytest.mark.parametrize(
    ("signer", "claimed"),
    [("ES256", "RS256"), ("RS256", "ES256"), ("EdDSA", "ES256"), ("ES256", "EdDSA")],
)
async def test_alg_that_disagrees_with_the_key_is_refused(
    server: JwksServer, keys: dict[str, TestKey], signer: str, claimed: str
) -> None:
    """A token naming key K but claiming another algorithm than K's is refused before any
    verification (and a token really signed with that algorithm by another key cannot pass)."""
    victim = keys[signer]
    forged = keys[claimed].sign(supabase_claims(server.issuer), kid=victim.kid)
    with pytest.raises(AuthError, match="does not match its key"):
        await verifier_for(server).verify(forged)


async def test_other_algorithms_are_refused(server: JwksServer, keys: dict[str, TestKey]) -> None:
    claims = supabase_claims(server.issuer)
    for alg in ("HS512", "RS512", "ES384", "PS256"):
        token = unsigned({"alg": alg, "kid": keys["ES256"].kid}, claims, b"x")
        with pytest.raises(AuthError, match="not allowed"):
            await verifier_for(server).verify(token)


async def test_signed_by_an_unpublished_key_is_refused(server: JwksServer) -> None:
    stranger = TestKey.generate("ES256")
    with pytest.raises(AuthError, match="unknown key"):
        await verifier_for(server).verify(stranger.sign(supabase_claims(server.issuer)))


async def test_signed_by_another_key_under_a_published_kid_is_refused(
    server: JwksServer, keys: dict[str, TestKey]
) -> None:
    stranger = TestKey.generate("ES256")
    token = stranger.sign(supabase_claims(server.issuer), kid=keys["ES256"].kid)
    with pytest.raises(AuthError, match="signature"):
        await verifier_for(server).verify(token)


async def test_tampered_claims_are_refused(server: JwksServer, keys: dict[str, TestKey]) -> None:
    header, _, signature = keys["ES256"].sign(supabase_claims(server.issuer)).split(".")
    forged = b64(
        json.dumps(supabase_claims(server.issuer, app_metadata={"tenant_id": "evil"})).encode()
    )
    with pytest.raises(AuthError, match="signature"):
        await verifier_for(server).verify(f"{header}.{forged}.{signature}")


@pytest.mark.parametrize(
    "header",
    [
        {"alg": "ES256"},
        {"alg": "ES256", "kid": ""},
        {"alg": "ES256", "kid": 5},
        {"alg": "ES256", "kid": "k" * 300},
    ],
    ids=["no-kid", "empty-kid", "number-kid", "huge-kid"],
)
async def test_unusable_kid_is_refused_without_a_fetch(
    server: JwksServer, header: dict[str, Any]
) -> None:
    with pytest.raises(AuthError, match="kid|malformed"):
        await verifier_for(server).verify(unsigned(header, supabase_claims(server.issuer), b"x"))
    assert server.requests == 0


@pytest.mark.parametrize("token", ["", "  ", "garbage", "a.b.c", "e30.e30"])
async def test_malformed_tokens(server: JwksServer, token: str) -> None:
    with pytest.raises(AuthError):
        await verifier_for(server).verify(token)


# ------------------------------------------------------------------ availability


async def test_down_endpoint_is_unavailable_but_cached_keys_work(
    server: JwksServer, keys: dict[str, TestKey]
) -> None:
    verifier = verifier_for(server, cache_seconds=600, min_refetch_seconds=0)
    es, rs = keys["ES256"], keys["RS256"]
    server.publish(es)
    assert await verifier.verify(es.sign(supabase_claims(server.issuer))) == ACME_ALICE
    server.publish(es, rs)
    server.down = True
    with pytest.raises(AuthUnavailableError, match="cannot verify") as raised:
        await verifier.verify(rs.sign(supabase_claims(server.issuer)))  # needs a refetch
    assert raised.value.retry_after_seconds == 1
    assert await verifier.verify(es.sign(supabase_claims(server.issuer))) == ACME_ALICE
    assert server.requests == 2
    server.down = False
    assert await verifier.verify(rs.sign(supabase_claims(server.issuer))) == ACME_ALICE


async def test_unavailable_before_any_fetch(server: JwksServer, keys: dict[str, TestKey]) -> None:
    server.down = True
    verifier = verifier_for(server)
    with pytest.raises(AuthUnavailableError, match="503"):
        await verifier.verify(keys["ES256"].sign(supabase_claims(server.issuer)))
    # the legacy secret does not depend on the JWKS
    assert (
        await verifier.verify(mint_token(SECRET, user_id="alice", tenant_id="acme")) == ACME_ALICE
    )


def test_from_settings() -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        supabase_url="https://abc.supabase.co",
        supabase_jwks_cache_seconds=120,
        supabase_jwks_min_refetch_seconds=10,
        jwt_leeway_seconds=5,
    )
    verifier = TokenVerifier.from_settings(settings)
    assert verifier.modes == ["jwks"]
    assert verifier.issuer == "https://abc.supabase.co/auth/v1"
    assert verifier.jwks is not None
    assert verifier.jwks.url == "https://abc.supabase.co/auth/v1/.well-known/jwks.json"
    assert (verifier.jwks.cache_seconds, verifier.jwks.min_refetch_seconds) == (120, 10)
    assert verifier.leeway_seconds == 5
    override = Settings(  # type: ignore[call-arg]
        _env_file=None,
        supabase_url="https://abc.supabase.co",
        supabase_jwks_url="https://keys.example/jwks.json",
        supabase_jwt_secret=SECRET,
    )
    verifier = TokenVerifier.from_settings(override)
    assert verifier.modes == ["hs256", "jwks"]
    assert verifier.jwks is not None and verifier.jwks.url == "https://keys.example/jwks.json"
    assert TokenVerifier.from_settings(Settings(_env_file=None)).modes == []  # type: ignore[call-arg]


async def test_a_token_that_passed_is_not_decoded_again_until_it_expires(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [time.time()]
    verifier = TokenVerifier(audience=AUDIENCE, secret=SECRET, clock=lambda: now[0])
    decoded: list[str] = []
    real = verifier_module.decode_claims

    def counting(token: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        decoded.append(token)
        return real(token, *args, **kwargs)

    monkeypatch.setattr(verifier_module, "decode_claims", counting)
    token = mint_token(SECRET, user_id="alice", tenant_id="acme", ttl_seconds=600)
    assert await verifier.verify(token) == ACME_ALICE
    assert await verifier.verify(token) == ACME_ALICE
    assert len(decoded) == 1
    other = mint_token(SECRET, user_id="bob", tenant_id="acme", ttl_seconds=600)
    assert (await verifier.verify(other)).user_id == "bob"  # by the exact token only
    assert len(decoded) == 2
    now[0] += 601  # past its exp by the verifier's clock: checked again, not taken from memory
    assert await verifier.verify(token) == ACME_ALICE
    assert len(decoded) == 3


async def test_a_remembered_token_is_refused_once_its_key_leaves_the_jwks(
    server: JwksServer, keys: dict[str, TestKey]
) -> None:
    verifier = verifier_for(server, cache_seconds=0, min_refetch_seconds=0)
    es, rs = keys["ES256"], keys["RS256"]
    token = es.sign(supabase_claims(server.issuer))
    assert await verifier.verify(token) == ACME_ALICE
    assert await verifier.verify(token) == ACME_ALICE
    server.publish(rs)  # the key rotated out (the JWKS is refetched on every use here)
    with pytest.raises(AuthError, match="unknown key"):
        await verifier.verify(token)
