"""A local Supabase Auth (GoTrue) server speaking the wire format `@supabase/supabase-js` uses.

`GoTrueServer` runs on 127.0.0.1 in a thread (for synchronous tests: Playwright's sync API and
the end-to-end stack) and answers, under `/auth/v1`:

- `POST /token?grant_type=password` `{email, password}`: a session (`access_token` signed by a
  `TestKey` with `iss` = `{url}/auth/v1`, `aud` authenticated, `sub` the user's id;
  `refresh_token`, `expires_in`, `expires_at`, `user`), or 400 `invalid_credentials`;
- `POST /token?grant_type=refresh_token` `{refresh_token}`: a new session (refresh tokens are
  single-use, as GoTrue rotates them);
- `GET /user` (bearer access token), `POST /logout`, `POST /otp` (a magic link "sent": recorded);
- `GET /.well-known/jwks.json`: the public key, which the API under test verifies tokens with;
- CORS, as Supabase does: the page runs on another origin (the API's).

Every request is recorded (`requests`) with its method, path and the `apikey` header.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt

from tests.fakes.jwks import JWKS_PATH, TestKey, supabase_claims

API_VERSION = "2024-01-01"


@dataclass
class User:
    """An account of the fake project."""

    email: str
    password: str
    id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def wire(self) -> dict[str, Any]:
        """The user object GoTrue returns."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return {
            "id": self.id,
            "aud": "authenticated",
            "role": "authenticated",
            "email": self.email,
            "email_confirmed_at": now,
            "app_metadata": {"provider": "email", "providers": ["email"]},
            "user_metadata": {},
            "identities": [],
            "created_at": now,
            "updated_at": now,
        }


@dataclass
class Seen:
    """One request the server answered."""

    method: str
    path: str
    query: dict[str, list[str]]
    apikey: str | None
    body: dict[str, Any]


class GoTrueServer:
    """The fake project's Auth server (a context manager)."""

    def __init__(self, users: list[User], *, expires_in: int = 3600) -> None:
        self.key = TestKey.generate("ES256")
        self.users = {u.email: u for u in users}
        self.expires_in = expires_in
        self.refresh_tokens: dict[str, User] = {}
        self.issued: list[str] = []  # access tokens, in order
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())

    @property
    def url(self) -> str:
        """What SUPABASE_URL is for this project."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> GoTrueServer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def seen(self, method: str, path: str) -> list[Seen]:
        """The requests to `/auth/v1{path}` with `method`."""
        with self._lock:
            return [r for r in self.requests if r.method == method and r.path == path]

    def session(self, user: User) -> dict[str, Any]:
        """A new session of `user` (a signed access token and a fresh refresh token)."""
        now = int(time.time())
        claims = supabase_claims(
            f"{self.url}/auth/v1",
            sub=user.id,
            email=user.email,
            exp=now + self.expires_in,
            iat=now,
            app_metadata={"provider": "email", "providers": ["email"]},
        )
        access = self.key.sign(claims)
        refresh = secrets.token_urlsafe(16)
        with self._lock:
            self.refresh_tokens[refresh] = user
            self.issued.append(access)
        return {
            "access_token": access,
            "token_type": "bearer",
            "expires_in": self.expires_in,
            "expires_at": now + self.expires_in,
            "refresh_token": refresh,
            "user": user.wire(),
        }

    def _user_of(self, authorization: str | None) -> User | None:
        token = (authorization or "").removeprefix("Bearer ").strip()
        try:
            claims = jwt.decode(
                token,
                self.key.private.public_key(),
                algorithms=["ES256"],
                audience="authenticated",
            )
        except jwt.InvalidTokenError:
            return None
        return next((u for u in self.users.values() if u.id == claims.get("sub")), None)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return  # quiet

            def _cors(self) -> None:
                self.send_header("Access-Control-Allow-Origin", self.headers.get("Origin") or "*")
                self.send_header("Access-Control-Allow-Credentials", "true")
                self.send_header("Vary", "Origin")

            def _send(self, status: int, body: Any = None) -> None:
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self._cors()
                self.send_header("X-Supabase-Api-Version", API_VERSION)
                if body is not None:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, code: str, message: str) -> None:
                self._send(status, {"code": code, "message": message})

            def do_OPTIONS(self) -> None:  # noqa: N802 - http.server's naming
                self.send_response(204)
                self._cors()
                self.send_header("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS")
                self.send_header(
                    "Access-Control-Allow-Headers",
                    self.headers.get("Access-Control-Request-Headers") or "*",
                )
                self.send_header("Access-Control-Max-Age", "600")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _seen(self) -> tuple[str, dict[str, list[str]], dict[str, Any]]:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = {}
                path = url.path.removeprefix("/auth/v1")
                query = parse_qs(url.query)
                with server._lock:
                    server.requests.append(
                        Seen(self.command, path, query, self.headers.get("apikey"), body)
                    )
                return path, query, body if isinstance(body, dict) else {}

            def do_GET(self) -> None:  # noqa: N802
                path, _, _ = self._seen()
                if "/auth/v1" + path == JWKS_PATH:
                    self._send(200, {"keys": [server.key.public_jwk()]})
                elif path == "/user":
                    user = server._user_of(self.headers.get("Authorization"))
                    if user is None:
                        self._error(401, "bad_jwt", "invalid JWT")
                    else:
                        self._send(200, user.wire())
                else:
                    self._error(404, "not_found", "not found")

            def do_POST(self) -> None:  # noqa: N802
                path, query, body = self._seen()
                grant = (query.get("grant_type") or [""])[0]
                if path == "/token" and grant == "password":
                    user = server.users.get(str(body.get("email", "")).lower())
                    if user is None or body.get("password") != user.password:
                        self._error(400, "invalid_credentials", "Invalid login credentials")
                    else:
                        self._send(200, server.session(user))
                elif path == "/token" and grant == "refresh_token":
                    with server._lock:
                        user = server.refresh_tokens.pop(str(body.get("refresh_token")), None)
                    if user is None:
                        self._error(400, "refresh_token_not_found", "Invalid Refresh Token")
                    else:
                        self._send(200, server.session(user))
                elif path == "/logout":
                    self._send(204)
                elif path == "/otp":
                    self._send(200, {})
                else:
                    self._error(404, "not_found", "not found")

        return Handler
