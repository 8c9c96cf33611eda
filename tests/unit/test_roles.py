"""Roles from tokens: app_metadata.role in a shared tenant, owner of one's own tenant."""

from __future__ import annotations

import pytest

from app.auth.jwt import mint_token, verify_token
from app.auth.principal import Principal
from app.auth.stream_ticket import mint_ticket, verify_ticket

SECRET = "s" * 40
RUN = "00000000-0000-0000-0000-000000000001"


def _verify(token: str) -> Principal:
    return verify_token(token, secret=SECRET, audience="authenticated")


@pytest.mark.parametrize("role", ["owner", "admin", "member"])
def test_shared_tenant_role_comes_from_app_metadata(role: str) -> None:
    p = _verify(mint_token(SECRET, user_id="u1", tenant_id="acme", role=role))
    assert p == Principal("u1", "acme", role)  # type: ignore[arg-type]


def test_shared_tenant_without_a_role_is_member() -> None:
    p = _verify(mint_token(SECRET, user_id="u1", tenant_id="acme"))
    assert p.role == "member" and not p.is_admin


@pytest.mark.parametrize("role", ["service", "superuser", "", 7, None])
def test_unknown_or_internal_roles_get_least_privilege(role: object) -> None:
    token = mint_token(SECRET, user_id="u1", tenant_id="acme", role=role)  # type: ignore[arg-type]
    assert _verify(token).role == "member"


def test_own_tenant_is_owned_whatever_the_claim_says() -> None:
    assert _verify(mint_token(SECRET, user_id="dev")).role == "owner"
    assert (
        _verify(mint_token(SECRET, user_id="dev", tenant_id="dev", role="member")).role == "owner"
    )


def test_db_claims_carry_the_resolved_role() -> None:
    claims = Principal("u1", "acme", "admin").db_claims()
    assert claims["app_metadata"] == {"tenant_id": "acme", "role": "admin"}
    assert Principal("u1", "acme").as_service().db_claims()["app_metadata"]["role"] == "service"


def test_a_principal_refuses_an_unknown_role() -> None:
    with pytest.raises(ValueError):
        Principal("u1", "acme", "root")  # type: ignore[arg-type]


def test_stream_tickets_keep_the_role_and_never_grant_service() -> None:
    from uuid import UUID

    key = b"k" * 32
    token, _ = mint_ticket(key, Principal("u1", "acme", "admin"), UUID(RUN), ttl_seconds=60)
    assert verify_ticket(key, token, run_id=UUID(RUN)).principal.role == "admin"
    from app.auth.stream_ticket import TicketError

    token, _ = mint_ticket(key, Principal("u1", "acme").as_service(), UUID(RUN), ttl_seconds=60)
    with pytest.raises(TicketError):
        verify_ticket(key, token, run_id=UUID(RUN))
