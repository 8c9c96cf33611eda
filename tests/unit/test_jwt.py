"""JWT verification and minting: every bad-token case is an AuthError; tenant derivation."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import jwt
import pytest

from app.auth.jwt import AuthError, is_weak_secret, mint_token, verify_token
from app.auth.principal import Principal

SECRET = "unit-test-secret-" + "0123456789abcdef" * 4  # long enough for HS512 too
AUD = "authenticated"


def encode(claims: dict[str, Any], secret: str = SECRET, algorithm: str = "HS256") -> str:
    return jwt.encode(claims, secret, algorithm=algorithm)


def claims(**overrides: Any) -> dict[str, Any]:
    # Tokens of the parametrize lists are built at collection, long before a slow suite runs them.
    base: dict[str, Any] = {"sub": "u1", "aud": AUD, "exp": int(time.time()) + 24 * 3600}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def verify(token: str) -> Principal:
    return verify_token(token, secret=SECRET, audience=AUD)


def test_minted_token_round_trips_with_tenant() -> None:
    token = mint_token(SECRET, user_id="alice", tenant_id="acme")
    assert verify(token) == Principal(user_id="alice", tenant_id="acme")
    decoded = jwt.decode(token, SECRET, algorithms=["HS256"], audience=AUD)
    assert decoded["role"] == "authenticated"
    assert decoded["app_metadata"] == {"tenant_id": "acme"}
    assert decoded["exp"] - decoded["iat"] == 3600 * 24


def test_minted_token_without_tenant_uses_sub() -> None:
    token = mint_token(SECRET, user_id="bob", ttl_seconds=60)
    assert "app_metadata" not in jwt.decode(token, SECRET, algorithms=["HS256"], audience=AUD)
    assert verify(token) == Principal(user_id="bob", tenant_id="bob")


@pytest.mark.parametrize(
    ("app_metadata", "tenant"),
    [
        ({"tenant_id": "t9"}, "t9"),
        ({"tenant_id": ""}, "u1"),
        ({"tenant_id": "   "}, "u1"),
        ({"tenant_id": 42}, "u1"),
        ({"tenant_id": "nul\u0000"}, "u1"),
        ({"other": "x"}, "u1"),
        ("not-an-object", "u1"),
        (None, "u1"),
    ],
)
def test_tenant_is_app_metadata_tenant_id_else_sub(app_metadata: Any, tenant: str) -> None:
    principal = verify(encode(claims(app_metadata=app_metadata)))
    assert principal == Principal(user_id="u1", tenant_id=tenant)


def test_custom_audience() -> None:
    token = mint_token(SECRET, user_id="u", audience="service")
    assert verify_token(token, secret=SECRET, audience="service").user_id == "u"
    with pytest.raises(AuthError, match="audience"):
        verify(token)


def _alg_none_token() -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims())}."


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("", "missing"),
        ("   ", "missing"),
        ("not-a-jwt", "malformed"),
        ("a.b.c", "malformed"),
        (encode(claims(), secret="another-" + SECRET), "signature"),
        (encode(claims(exp=int(time.time()) - 10)), "expired"),
        (encode(claims(aud="somebody-else")), "audience"),
        (encode(claims(aud=None)), "'aud'"),
        (encode(claims(exp=None)), "'exp'"),
        (encode(claims(sub=None)), "'sub'"),
        (encode(claims(sub="")), "sub"),
        (encode(claims(sub="nul\u0000")), "sub"),
        (encode(claims(), algorithm="HS512"), "algorithm"),
        (_alg_none_token(), "algorithm"),
    ],
    ids=[
        "empty",
        "blank",
        "garbage",
        "three-garbage-parts",
        "wrong-secret",
        "expired",
        "wrong-audience",
        "no-aud",
        "no-exp",
        "no-sub",
        "empty-sub",
        "nul-in-sub",
        "hs512",
        "alg-none",
    ],
)
def test_bad_tokens_raise_auth_error(token: str, message: str) -> None:
    with pytest.raises(AuthError, match=message) as info:
        verify(token)
    assert info.value.message == str(info.value)


def test_tampered_payload_is_rejected() -> None:
    header, _, signature = mint_token(SECRET, user_id="alice", tenant_id="acme").split(".")
    forged = base64.urlsafe_b64encode(
        json.dumps(claims(sub="alice", app_metadata={"tenant_id": "evil"})).encode()
    )
    with pytest.raises(AuthError, match="signature"):
        verify(f"{header}.{forged.decode().rstrip('=')}.{signature}")


def test_short_secrets_work_and_are_flagged() -> None:
    token = mint_token("short", user_id="u")
    assert verify_token(token, secret="short", audience=AUD).user_id == "u"
    assert is_weak_secret("short") and not is_weak_secret(SECRET)
