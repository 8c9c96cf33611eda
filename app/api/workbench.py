"""The workbench: the browser page served at `/` (static files in `app/web/static/`).

The page uses only the public HTTP API. This module serves its files and tells it how to sign in
(`GET /workbench/config.json`). On a developer machine it may also hand the page a token for the
dev user (`POST /workbench/dev-token`), under every one of these conditions, checked per request:

- `WORKBENCH_DEV_SIGN_IN` is on (`serve` sets it only on the embedded database with a generated
  secret), and the JWT secret in use *is* the generated one in AGENT_RUNTIME_DATA_DIR: a server
  configured with a real SUPABASE_JWT_SECRET never mints, whatever its environment says;
- the API is bound to a loopback address and the request comes from one: nobody on the network
  can reach it;
- the `Host` header names a loopback host: a DNS-rebinding page (evil.example resolving to
  127.0.0.1) sends its own host name and is refused;
- no reverse-proxy header (`Forwarded`, `X-Forwarded-For`, …): a proxy on this machine would
  otherwise make a request from the network look local;
- the browser says the request comes from the page itself (`Sec-Fetch-Site: same-origin`), so
  another local origin allowed by CORS_ALLOW_LOCALHOST cannot collect a token either.

Whoever passes all of these is a process of this machine that could read the banner's token, so
the endpoint gives away nothing `serve` does not already print. Otherwise it answers 404.

With SUPABASE_URL and SUPABASE_ANON_KEY set, the page signs in with Supabase Auth instead (the
`@supabase/supabase-js` browser bundle vendored in `app/web/static/vendor/supabase-js/`), and the
dev sign-in is off.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from urllib.parse import urlsplit

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from app.api.errors import ApiError
from app.auth.jwt import mint_token
from app.auth.secret import secret_path
from app.config import Settings

STATIC_DIR = Path(__file__).resolve().parents[1] / "web" / "static"
DEV_USER = "dev"
DEV_TOKEN_SECONDS = 3600 * 12
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "[::1]", "::1"}
PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-real-ip")
"""Set by a reverse proxy: the request came through one, so maybe from the network."""

router = APIRouter(include_in_schema=False)


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(header: str | None) -> str:
    """The host of a `Host` header, without its port (`[::1]:8000` → `[::1]`)."""
    value = (header or "").strip().lower()
    if value.startswith("["):
        return value.split("]", 1)[0] + "]"
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _uses_generated_secret(settings: Settings) -> bool:
    """The secret in use is the one `serve` generated for this machine (not a configured one)."""
    try:
        generated = secret_path(settings).read_text().strip()
    except OSError:
        return False
    return bool(generated) and settings.supabase_jwt_secret == generated


def supabase_sign_in(settings: Settings) -> bool:
    """The page signs in with Supabase Auth (SUPABASE_URL and SUPABASE_ANON_KEY are set)."""
    return bool(settings.supabase_url and settings.supabase_anon_key)


def dev_sign_in_available(settings: Settings) -> bool:
    """The server-side conditions of the dev sign-in (the request ones are in `dev_token`).
    Supabase sign-in, when configured, replaces it."""
    return (
        settings.workbench_dev_sign_in
        and not supabase_sign_in(settings)
        and _is_loopback(settings.host)
        and _uses_generated_secret(settings)
    )


def _dev_request(request: Request) -> bool:
    """The request-side conditions: from this machine, to a loopback host, from the page itself."""
    return (
        _is_loopback(request.client.host if request.client else None)
        and _host_name(request.headers.get("host")) in LOOPBACK_NAMES
        and request.headers.get("sec-fetch-site") == "same-origin"
        and not any(h in request.headers for h in PROXY_HEADERS)
    )


def content_security_policy(settings: Settings) -> str:
    """The page's CSP: its own scripts and styles only (no inline code, no CDN), API calls to this
    origin (and to Supabase Auth when configured), never framed. Model and tool output is only
    ever put into the page as text; this is the second wall if that ever slips."""
    connect = "'self'"
    if settings.supabase_url:  # its origin only: a path could carry `;` into the header
        parts = urlsplit(settings.supabase_url)
        connect += f" {parts.scheme}://{parts.netloc}"
    return "; ".join(
        [
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data: blob:",
            f"connect-src {connect}",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


@router.get("/")
async def index(request: Request) -> FileResponse:
    """The workbench page."""
    settings: Settings = request.app.state.settings
    return FileResponse(
        STATIC_DIR / "index.html",
        headers={
            "Cache-Control": "no-cache",
            "Content-Security-Policy": content_security_policy(settings),
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        },
    )


def sign_in_config(settings: Settings, request: Request) -> dict[str, str]:
    """How the page signs in. `supabase` (SUPABASE_URL and SUPABASE_ANON_KEY set: Supabase Auth
    in the browser, whose access tokens the API verifies with the project's JWKS) wins over `dev`
    (ask `/workbench/dev-token`); otherwise `token` (the user pastes one)."""
    if supabase_sign_in(settings):
        assert settings.supabase_url and settings.supabase_anon_key
        return {
            "auth": "supabase",
            "supabaseUrl": settings.supabase_url,
            "supabaseAnonKey": settings.supabase_anon_key,
        }
    if dev_sign_in_available(settings) and _dev_request(request):
        return {"auth": "dev"}
    return {"auth": "token"}


@router.get("/workbench/config.json")
async def config(request: Request) -> JSONResponse:
    """How the page signs in: `supabase`, `dev` or `token` (see `sign_in_config`)."""
    settings: Settings = request.app.state.settings
    return JSONResponse(sign_in_config(settings, request), headers={"Cache-Control": "no-store"})


@router.post("/workbench/dev-token")
async def dev_token(request: Request) -> JSONResponse:
    """A token for the dev user, only on a local generated-secret setup (see the module doc)."""
    settings: Settings = request.app.state.settings
    if not (dev_sign_in_available(settings) and _dev_request(request)):
        raise ApiError(404, "Not Found")
    assert settings.supabase_jwt_secret  # checked by dev_sign_in_available
    token = mint_token(
        settings.supabase_jwt_secret,
        user_id=DEV_USER,
        audience=settings.jwt_audience,
        ttl_seconds=DEV_TOKEN_SECONDS,
    )
    return JSONResponse(
        {"token": token, "user": DEV_USER, "expiresIn": DEV_TOKEN_SECONDS},
        headers={"Cache-Control": "no-store"},
    )


def install_workbench(app: FastAPI) -> None:
    """Serve the page at `/` and its files under `/workbench/`."""
    app.include_router(router)
    app.mount("/workbench", StaticFiles(directory=STATIC_DIR), name="workbench")
