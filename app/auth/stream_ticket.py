"""Stream tickets: short-lived, read-only credentials for one run's SSE stream.

A browser's `EventSource` cannot send an `Authorization` header, so a page first trades its bearer
token for a ticket (`POST /api/agent-runtime/stream-tickets`) and puts the ticket in the stream's
URL. A ticket is stateless: `st1.<payload>.<mac>`, where the payload is base64url JSON
`{"r": run id, "u": user, "t": tenant, "e": expiry (unix seconds)}` and the mac is HMAC-SHA256 of
`st1.<payload>` under the ticket key. Any API replica with the same key verifies it, and it stays
valid across an `EventSource`'s reconnects until it expires (it is not single-use).

The key is STREAM_TICKET_SECRET when set, else derived with HKDF-SHA256 from the HS256 JWT
secret (configured or generated), so replicas that share the JWT secret agree on tickets. A
server with neither cannot issue tickets.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time
from dataclasses import dataclass
from functools import lru_cache
from uuid import UUID

from app.auth.jwt import MAX_ID_CHARS
from app.auth.principal import TOKEN_ROLES, Principal, Role
from app.config import Settings

PREFIX = "st1"
"""Version tag and the start of every ticket (a changed format gets a new tag)."""
MAX_TICKET_CHARS = 2048
"""Longer than any ticket we issue (two ids of at most 255 characters, base64-encoded)."""
_B64URL = re.compile(r"[A-Za-z0-9_-]+")
_HKDF_SALT = b"agent-runtime"
_HKDF_INFO = b"agent-runtime stream ticket v1"


class TicketError(Exception):
    """The ticket is malformed, forged, expired or for another run (answered 401)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class StreamTicket:
    """A verified ticket: whose it is, for which run, until when."""

    run_id: UUID
    principal: Principal
    expires_at: int
    """Unix seconds."""


def hkdf_sha256(ikm: bytes, *, salt: bytes, info: bytes, length: int = 32) -> bytes:
    """HKDF (RFC 5869) with SHA-256: extract, then expand to `length` bytes."""
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        out += block
        counter += 1
    return out[:length]


def ticket_key(settings: Settings) -> bytes | None:
    """The key tickets are signed with (None: no STREAM_TICKET_SECRET and no JWT secret)."""
    explicit = settings.stream_ticket_secret
    if explicit is not None and explicit.get_secret_value():
        return _derive(explicit.get_secret_value(), b"explicit")
    if settings.supabase_jwt_secret:
        return _derive(settings.supabase_jwt_secret, b"jwt")
    return None


@lru_cache(maxsize=8)
def _derive(secret: str, source: bytes) -> bytes:
    # Never the JWT secret itself: a ticket MAC must not be usable as (or reveal) a JWT signature.
    return hkdf_sha256(secret.encode(), salt=_HKDF_SALT, info=_HKDF_INFO + b"/" + source)


def mint_ticket(
    key: bytes, principal: Principal, run_id: UUID, *, ttl_seconds: int, now: float | None = None
) -> tuple[str, StreamTicket]:
    """A ticket for `principal` to stream `run_id` for `ttl_seconds`, and what it grants."""
    expires_at = int(now if now is not None else time.time()) + ttl_seconds
    payload = {
        "r": str(run_id),
        "u": principal.user_id,
        "t": principal.tenant_id,
        "o": principal.role,
        "e": expires_at,
    }
    body = _b64(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())
    signed = f"{PREFIX}.{body}"
    token = f"{signed}.{_b64(_mac(key, signed))}"
    return token, StreamTicket(run_id=run_id, principal=principal, expires_at=expires_at)


def verify_ticket(
    key: bytes, ticket: str, *, run_id: UUID, now: float | None = None
) -> StreamTicket:
    """The grant of a genuine, unexpired ticket for `run_id`; else `TicketError`."""
    parts = ticket.split(".")
    if len(ticket) > MAX_TICKET_CHARS or len(parts) != 3 or parts[0] != PREFIX:
        raise TicketError("stream ticket is malformed")
    signed = f"{parts[0]}.{parts[1]}"
    try:
        given = _unb64(parts[2])
    except ValueError:
        raise TicketError("stream ticket is malformed") from None
    if not hmac.compare_digest(given, _mac(key, signed)):
        raise TicketError("stream ticket signature is invalid")
    try:
        payload = json.loads(_unb64(parts[1]))
        grant = StreamTicket(
            run_id=UUID(payload["r"]),
            principal=Principal(
                user_id=_id(payload["u"]),
                tenant_id=_id(payload["t"]),
                role=_token_role(payload.get("o")),
            ),
            expires_at=int(payload["e"]),
        )
    except (ValueError, KeyError, TypeError):
        raise TicketError("stream ticket is malformed") from None
    if (now if now is not None else time.time()) >= grant.expires_at:
        raise TicketError(
            "stream ticket has expired: get a new one with POST /api/agent-runtime/stream-tickets"
        )
    if grant.run_id != run_id:
        raise TicketError("stream ticket is for another run")
    return grant


def _mac(key: bytes, signed: str) -> bytes:
    return hmac.new(key, signed.encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    # Strict: the decoder would skip stray characters, making one ticket spellable many ways.
    if not _B64URL.fullmatch(text):
        raise ValueError("not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not base64url") from exc


def _id(value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS:
        raise ValueError("bad id")
    return value


def _token_role(value: object) -> Role | None:
    """The role a ticket carries (None: the default rule); never `service`, which no ticket grants."""
    if value is None:
        return None
    if not isinstance(value, str) or value not in TOKEN_ROLES:
        raise ValueError("bad role")
    return value  # type: ignore[return-value]  # narrowed by TOKEN_ROLES
