"""How a call of a tenant HTTP tool is signed, so that its receiver can tell it is ours.

Every call carries:

* `X-Agent-Runtime-Signature: t=<unix seconds>,v1=<hex>` where `<hex>` is the HMAC-SHA256, keyed
  with the tool's signing secret (its UTF-8 bytes), of `<t>.<delivery>.` followed by the payload:
  the request body as sent, or for GET (which has no body) the raw query string as sent (without
  the `?`);
* `X-Agent-Runtime-Delivery: <uuid>`: one id per tool call (the same when a call is sent again),
  for the receiver's idempotency; it is signed, so it cannot be swapped;
* `X-Agent-Runtime-Tool: <name>` and `X-Agent-Runtime-Run: <run id>` (informational).

A receiver recomputes the HMAC, compares in constant time, and refuses a `t` older than a few
minutes (replays); `verify` is the reference implementation (docs/tools.md shows it standalone).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid

SIGNATURE_HEADER = "X-Agent-Runtime-Signature"
DELIVERY_HEADER = "X-Agent-Runtime-Delivery"
TOOL_HEADER = "X-Agent-Runtime-Tool"
RUN_HEADER = "X-Agent-Runtime-Run"
SECRET_PREFIX = "arts_"
"""Signing secrets read `arts_` + 43 URL-safe characters (32 random bytes)."""
DEFAULT_TOLERANCE_SECONDS = 300

_DELIVERY_NAMESPACE = uuid.UUID("5b3c1f9e-8a3e-4f57-9d0c-3c6a1e2b7d41")


def new_secret() -> str:
    """A fresh signing secret."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def delivery_id(run_id: uuid.UUID, tool_call_id: str) -> str:
    """The delivery id of a tool call: stable for the call, distinct across calls and runs."""
    return str(uuid.uuid5(_DELIVERY_NAMESPACE, f"{run_id}/{tool_call_id}"))


def signature(secret: str, timestamp: int, delivery: str, payload: bytes) -> str:
    """The `X-Agent-Runtime-Signature` value for `payload` sent at `timestamp`."""
    mac = hmac.new(secret.encode(), f"{timestamp}.{delivery}.".encode() + payload, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(
    secret: str,
    header: str,
    delivery: str,
    payload: bytes,
    now: float,
    tolerance: float = DEFAULT_TOLERANCE_SECONDS,
) -> bool:
    """Whether `header` signs `payload` and `delivery` with `secret`, within `tolerance` of `now`."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance:
        return False
    expected = signature(secret, timestamp, delivery, payload).partition(",v1=")[2]
    return hmac.compare_digest(expected, fields.get("v1", ""))
