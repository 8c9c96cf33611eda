"""Stream tickets: signing, verification, key derivation, and their masking in logs."""

from __future__ import annotations

import logging
import uuid

import pytest
from pydantic import SecretStr

from app.auth.principal import Principal
from app.auth.stream_ticket import (
    TicketError,
    hkdf_sha256,
    mint_ticket,
    ticket_key,
    verify_ticket,
)
from app.config import Settings
from app.logging import MASK, RedactRecordArgs, redact_text

KEY = b"k" * 32
ALICE = Principal(user_id="alice", tenant_id="acme")
RUN = uuid.UUID("7b0f2a64-4a8e-4f0e-9d61-2f3c7f0b9e11")
NOW = 1_700_000_000.0


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_a_ticket_carries_its_run_and_principal_until_it_expires() -> None:
    ticket, grant = mint_ticket(KEY, ALICE, RUN, ttl_seconds=300, now=NOW)
    assert grant.expires_at == int(NOW) + 300
    assert verify_ticket(KEY, ticket, run_id=RUN, now=NOW + 299) == grant
    assert verify_ticket(KEY, ticket, run_id=RUN, now=NOW + 1) == grant  # not single-use
    with pytest.raises(TicketError, match="expired"):
        verify_ticket(KEY, ticket, run_id=RUN, now=NOW + 300)


def test_a_ticket_is_for_one_run_and_one_key() -> None:
    ticket, _ = mint_ticket(KEY, ALICE, RUN, ttl_seconds=300, now=NOW)
    with pytest.raises(TicketError, match="another run"):
        verify_ticket(KEY, ticket, run_id=uuid.uuid4(), now=NOW)
    with pytest.raises(TicketError, match="signature"):
        verify_ticket(b"x" * 32, ticket, run_id=RUN, now=NOW)


def test_a_changed_ticket_is_refused() -> None:
    ticket, _ = mint_ticket(KEY, ALICE, RUN, ttl_seconds=300, now=NOW)
    prefix, payload, mac = ticket.split(".")
    other, _ = mint_ticket(
        KEY, Principal(user_id="mallory", tenant_id="evil"), RUN, ttl_seconds=300, now=NOW
    )
    swapped = f"{prefix}.{other.split('.')[1]}.{mac}"  # someone else's payload, alice's mac
    for bad in (
        swapped,
        f"{prefix}.{payload}.{mac[:-2]}",
        f"{prefix}.{payload}.{mac}!",  # stray characters the base64 decoder would skip
        f"st2.{payload}.{mac}",
        f"{prefix}.{payload}",
        "",
        "eyJhbGciOiJIUzI1NiJ9.e30.sig",  # a JWT-shaped string
        "st1." + "A" * 3000 + ".x",
    ):
        with pytest.raises(TicketError):
            verify_ticket(KEY, bad, run_id=RUN, now=NOW)


def test_a_forged_payload_needs_the_key() -> None:
    import base64
    import hashlib
    import hmac
    import json

    body = base64.urlsafe_b64encode(
        json.dumps({"r": str(RUN), "u": "alice", "t": "acme", "e": 2**40}).encode()
    )
    signed = "st1." + body.rstrip(b"=").decode()
    mac = hmac.new(b"guess", signed.encode(), hashlib.sha256).digest()
    forged = signed + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    with pytest.raises(TicketError, match="signature"):
        verify_ticket(KEY, forged, run_id=RUN, now=NOW)


def test_hkdf_matches_rfc_5869_test_case_1() -> None:
    okm = hkdf_sha256(
        bytes.fromhex("0b" * 22),
        salt=bytes.fromhex("000102030405060708090a0b0c"),
        info=bytes.fromhex("f0f1f2f3f4f5f6f7f8f9"),
        length=42,
    )
    assert okm.hex() == (
        "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
    )


def test_the_key_comes_from_the_ticket_secret_else_from_the_jwt_secret() -> None:
    jwt_secret = "j" * 40
    derived = ticket_key(settings(supabase_jwt_secret=jwt_secret))
    assert derived is not None and len(derived) == 32
    assert derived != jwt_secret.encode()[:32]
    # replicas with the same secret agree; an explicit STREAM_TICKET_SECRET wins
    assert ticket_key(settings(supabase_jwt_secret=jwt_secret)) == derived
    explicit = ticket_key(
        settings(supabase_jwt_secret=jwt_secret, stream_ticket_secret=SecretStr("s" * 40))
    )
    assert explicit is not None and explicit != derived
    assert explicit == ticket_key(settings(stream_ticket_secret=SecretStr("s" * 40)))
    assert ticket_key(settings()) is None


def test_tickets_are_masked_in_log_text() -> None:
    ticket, _ = mint_ticket(KEY, ALICE, RUN, ttl_seconds=300, now=NOW)
    line = f'127.0.0.1:5 - "GET /api/agent-runtime/stream?runId={RUN}&ticket={ticket} HTTP/1.1" 200'
    assert ticket not in redact_text(line)
    assert f"&ticket={MASK} HTTP/1.1" in redact_text(line)
    assert redact_text(f"?ticket=abc&x=1 then {ticket}.") == f"?ticket={MASK}&x=1 then {MASK}."


def test_the_access_log_filter_masks_the_request_line_before_formatting() -> None:
    ticket, _ = mint_ticket(KEY, ALICE, RUN, ttl_seconds=300, now=NOW)
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        (
            "127.0.0.1:5",
            "GET",
            f"/api/agent-runtime/stream?runId={RUN}&ticket={ticket}",
            "1.1",
            200,
        ),
        None,
    )
    assert RedactRecordArgs().filter(record)
    assert ticket not in record.getMessage()
    assert f"ticket={MASK}" in record.getMessage()
