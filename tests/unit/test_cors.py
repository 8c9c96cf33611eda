"""CORS: preflights from allowed origins, nothing for others, the local-dev localhost rule, and
`*` with credentials refused at startup."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from app.api.app import create_app
from app.config import Settings
from app.serve import banner, child_env

APP_ORIGIN = "https://app.example.com"
PREFLIGHT_POST = {
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type, idempotency-key",
}


def settings(**values: Any) -> Settings:
    return Settings(_env_file=None, supabase_jwt_secret="s" * 40, **values)  # type: ignore[arg-type]


async def request(s: Settings, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    """A request to the app (no lifespan: CORS and /healthz need no database)."""
    transport = httpx.ASGITransport(app=create_app(s))
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as client:
        return await client.request(method, path, headers=headers)


def cors_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.startswith("access-control-")}


def listed(value: str) -> set[str]:
    return {part.strip().lower() for part in value.split(",")}


async def test_preflight_from_an_allowed_origin() -> None:
    s = settings(cors_origins=f"{APP_ORIGIN}, http://localhost:3000")
    r = await request(s, "OPTIONS", "/api/agent-runtime", {"Origin": APP_ORIGIN, **PREFLIGHT_POST})
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == APP_ORIGIN
    assert r.headers["access-control-allow-credentials"] == "true"
    assert "post" in listed(r.headers["access-control-allow-methods"])
    assert {"authorization", "content-type", "idempotency-key", "last-event-id"} <= listed(
        r.headers["access-control-allow-headers"]
    )
    assert int(r.headers["access-control-max-age"]) > 0


async def test_preflight_for_a_stream_resume() -> None:
    s = settings(cors_origins=APP_ORIGIN)
    headers = {
        "Origin": APP_ORIGIN,
        "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "authorization,last-event-id,cache-control",
    }
    r = await request(s, "OPTIONS", "/api/agent-runtime/stream", headers)
    assert r.status_code == 200, r.text


async def test_actual_response_exposes_the_headers_clients_read() -> None:
    s = settings(cors_origins=APP_ORIGIN)
    r = await request(s, "GET", "/healthz", {"Origin": APP_ORIGIN})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == APP_ORIGIN
    assert r.headers["access-control-allow-credentials"] == "true"
    exposed = {"retry-after", "location", "last-event-id", "x-vercel-ai-ui-message-stream"}
    exposed.add("idempotent-replayed")
    assert exposed <= listed(r.headers["access-control-expose-headers"])
    assert "origin" in listed(r.headers["vary"])


async def test_error_responses_carry_cors_headers_too() -> None:
    s = settings(cors_origins=APP_ORIGIN)
    r = await request(s, "GET", "/api/agent-runtime/sessions", {"Origin": APP_ORIGIN})
    assert r.status_code == 401  # no token: the browser can still read why
    assert r.headers["access-control-allow-origin"] == APP_ORIGIN


@pytest.mark.parametrize(
    "origin",
    [
        "https://evil.example.com",
        "https://app.example.com.evil.com",
        "http://app.example.com",  # another scheme is another origin
        "https://app.example.com:8443",
        "http://localhost:3000",  # not listed, and not the embedded default
        "null",
    ],
)
async def test_other_origins_get_no_cors_headers(origin: str) -> None:
    s = settings(cors_origins=APP_ORIGIN)
    r = await request(s, "OPTIONS", "/api/agent-runtime", {"Origin": origin, **PREFLIGHT_POST})
    assert r.status_code == 400
    assert cors_headers(r) == {}
    assert r.json()["error"]["code"] == "cors_refused"
    r = await request(s, "GET", "/healthz", {"Origin": origin})
    assert r.status_code == 200 and cors_headers(r) == {}


async def test_a_header_not_allowed_is_refused() -> None:
    s = settings(cors_origins=APP_ORIGIN)
    headers = {
        "Origin": APP_ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, x-something-else",
    }
    r = await request(s, "OPTIONS", "/api/agent-runtime", headers)
    assert r.status_code == 400 and "headers" in r.json()["error"]["message"]


async def test_unset_means_no_cross_origin_access() -> None:
    s = settings()
    r = await request(
        s, "OPTIONS", "/api/agent-runtime", {"Origin": "http://localhost:3000", **PREFLIGHT_POST}
    )
    assert r.status_code == 405 and cors_headers(r) == {}
    r = await request(s, "GET", "/healthz", {"Origin": "http://localhost:3000"})
    assert cors_headers(r) == {}


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://localhost:3000", True),
        ("http://localhost:5173", True),
        ("http://127.0.0.1:8080", True),
        ("http://localhost", True),
        ("https://localhost:3000", False),
        ("http://localhost.evil.com:3000", False),
        ("http://localhost:3000.evil.com", False),
        ("http://127.0.0.2:3000", False),
        ("https://app.example.com", False),
    ],
)
async def test_localhost_rule(origin: str, allowed: bool) -> None:
    s = settings(cors_allow_localhost=True)
    r = await request(s, "OPTIONS", "/api/agent-runtime", {"Origin": origin, **PREFLIGHT_POST})
    assert (r.status_code == 200) is allowed, r.text
    assert (r.headers.get("access-control-allow-origin") == origin) is allowed


async def test_localhost_rule_adds_to_listed_origins() -> None:
    s = settings(cors_origins=APP_ORIGIN, cors_allow_localhost=True)
    for origin in (APP_ORIGIN, "http://localhost:4000"):
        r = await request(s, "OPTIONS", "/api/agent-runtime", {"Origin": origin, **PREFLIGHT_POST})
        assert r.status_code == 200


def test_serve_turns_the_localhost_rule_on_for_the_embedded_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CORS_ALLOW_LOCALHOST", raising=False)
    url, secret = "postgresql://u@localhost/db", "s" * 40
    assert child_env(settings(), url, secret, embedded=True)["CORS_ALLOW_LOCALHOST"] == "true"
    for env in (
        child_env(settings(), url, secret, embedded=False),  # DATABASE_URL set: production-like
        child_env(settings(cors_origins=APP_ORIGIN), url, secret, embedded=True),  # explicit
        child_env(settings(cors_allow_localhost=False), url, secret, embedded=True),  # explicit
    ):
        assert "CORS_ALLOW_LOCALHOST" not in env
    # and what serve passes is what the API's settings read
    monkeypatch.setenv("CORS_ALLOW_LOCALHOST", "true")
    assert Settings(_env_file=None).cors_allow_localhost  # type: ignore[call-arg]


async def test_wildcard_without_credentials_allows_any_origin() -> None:
    s = settings(cors_origins="*", cors_allow_credentials=False)
    r = await request(
        s, "OPTIONS", "/api/agent-runtime", {"Origin": "https://any.example", **PREFLIGHT_POST}
    )
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in r.headers


def test_wildcard_with_credentials_is_refused() -> None:
    with pytest.raises(
        ValidationError, match=r"CORS_ORIGINS=\* cannot be combined with credentials"
    ):
        settings(cors_origins="*")
    with pytest.raises(ValidationError, match="credentials"):
        settings(cors_origins=f"{APP_ORIGIN},*", cors_allow_credentials=True)


def test_wildcard_with_credentials_from_the_environment_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CORS_ORIGINS", "*")
    with pytest.raises(ValidationError, match="CORS_ALLOW_CREDENTIALS=false"):
        Settings(_env_file=None)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        ("", []),
        (
            " https://A.example.com/ , http://localhost:3000,",
            ["https://a.example.com", "http://localhost:3000"],
        ),
        ("http://[::1]:3000", ["http://[::1]:3000"]),
    ],
)
def test_origins_are_parsed_from_a_comma_separated_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str, parsed: list[str]
) -> None:
    monkeypatch.setenv("CORS_ORIGINS", raw)
    assert Settings(_env_file=None).cors_origins == parsed  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "bad",
    [
        "app.example.com",
        "https://app.example.com/path",
        "ftp://x.example",
        "https://u:p@x.example",
        "https://x.example/?q",
    ],
)
def test_malformed_origins_are_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="is not an origin"):
        settings(cors_origins=bad)


def test_serve_banner_says_when_local_frontends_may_call() -> None:
    from pathlib import Path

    url, secret_file = "postgresql://u@localhost/db", Path("jwt-secret")
    assert "localhost:<port>" in banner(settings(), url, True, None, secret_file)
    assert "CORS" not in banner(settings(), url, False, None, secret_file)
    assert "CORS" not in banner(settings(cors_origins=APP_ORIGIN), url, True, None, secret_file)
