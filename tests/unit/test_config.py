"""Settings validation: values that would break a documented guarantee are refused at startup."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.config import Settings


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[arg-type]


def test_defaults_are_valid() -> None:
    s = settings()
    assert s.sse_keepalive_seconds <= 15
    assert s.heartbeat_seconds < s.lease_seconds / 2


@pytest.mark.parametrize("keepalive", [0.5, 10, 15])
def test_sse_keepalive_up_to_15_seconds(keepalive: float) -> None:
    assert settings(sse_keepalive_seconds=keepalive).sse_keepalive_seconds == keepalive


@pytest.mark.parametrize("keepalive", [15.01, 30])
def test_sse_keepalive_over_15_seconds_is_refused(keepalive: float) -> None:
    with pytest.raises(ValidationError, match="sse_keepalive_seconds"):
        settings(sse_keepalive_seconds=keepalive)


def test_sse_keepalive_from_the_environment_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSE_KEEPALIVE_SECONDS", "20")
    with pytest.raises(ValidationError, match="less than or equal to 15"):
        Settings(_env_file=None)  # type: ignore[call-arg]


@pytest.mark.parametrize(("lease", "heartbeat"), [(15, 2), (3, 1.4), (2, 0.5)])
def test_heartbeat_under_half_the_lease(lease: float, heartbeat: float) -> None:
    s = settings(lease_seconds=lease, heartbeat_seconds=heartbeat)
    assert (s.lease_seconds, s.heartbeat_seconds) == (lease, heartbeat)


@pytest.mark.parametrize(("lease", "heartbeat"), [(15, 7.5), (15, 10), (2, 2), (1, 5)])
def test_heartbeat_at_or_over_half_the_lease_is_refused(lease: float, heartbeat: float) -> None:
    with pytest.raises(ValidationError) as raised:
        settings(lease_seconds=lease, heartbeat_seconds=heartbeat)
    message = str(raised.value)
    assert "HEARTBEAT_SECONDS" in message
    assert "less than half of LEASE_SECONDS" in message


def test_heartbeat_check_sees_environment_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEASE_SECONDS", "4")
    monkeypatch.setenv("HEARTBEAT_SECONDS", "2")
    with pytest.raises(ValidationError, match=r"HEARTBEAT_SECONDS \(2\).*LEASE_SECONDS \(4\)"):
        Settings(_env_file=None)  # type: ignore[call-arg]


def test_supabase_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    s = settings(supabase_url="https://abc.supabase.co/")
    assert s.supabase_url == "https://abc.supabase.co"
    assert s.supabase_issuer() == "https://abc.supabase.co/auth/v1"
    assert s.jwks_url() == "https://abc.supabase.co/auth/v1/.well-known/jwks.json"
    assert settings().jwks_url() is None and settings().supabase_issuer() is None
    monkeypatch.setenv("SUPABASE_URL", "")  # compose's `${SUPABASE_URL:-}`: unset
    assert Settings(_env_file=None).supabase_url is None  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"supabase_url": "abc.supabase.co"}, "not an http"),
        ({"supabase_url": "ftp://abc.supabase.co"}, "not an http"),
        ({"supabase_jwks_url": "https://keys.example/jwks.json"}, "needs SUPABASE_URL"),
        ({"supabase_jwks_cache_seconds": 0}, "greater than 0"),
        ({"jwt_leeway_seconds": -1}, "greater than or equal to 0"),
        ({"jwt_leeway_seconds": 3600}, "less than or equal to 300"),
    ],
)
def test_bad_auth_settings_are_refused(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        settings(**values)
