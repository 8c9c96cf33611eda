"""The tenant provider keys API: admins only, the key never shown (last 4 only), stored encrypted
and bound to its tenant and provider, base URLs checked, audited; rotation with `secrets
reencrypt`; a deployment without SECRETS_KEY refuses to store keys (503) but works otherwise."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from sqlalchemy import text

from app import cli
from app.db.engine import Database
from app.tenants.crypto import Keyring, Sealed, SecretsKeyError
from app.tenants.provider_keys import aad
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api

KEYS = "/api/agent-runtime/provider-keys"
K1 = base64.b64encode(bytes(range(32))).decode()
K2 = base64.b64encode(bytes(range(50, 82))).decode()
OPENAI_KEY = "sk-tenant-acme-0123456789abcdefWXYZ"
GEMINI_KEY = "AIza-tenant-acme-gemini-9876543210-LAST"
LOCAL = ["127.0.0.1/32"]


@pytest.fixture
async def api(db_url: str, database: Database) -> AsyncIterator[Api]:
    settings = make_settings(db_url, secrets_key=f"kid1:{K1}", web_allowed_networks=LOCAL)
    async with running_api(settings, database) as api:
        yield api


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


async def raw_rows(database: Database) -> list[dict[str, Any]]:
    async with database.owner() as s:
        rows = await s.execute(
            text("SELECT * FROM tenant_provider_keys ORDER BY tenant_id, provider")
        )
        return [dict(r) for r in rows.mappings()]


async def audit_rows(database: Database) -> list[dict[str, Any]]:
    async with database.owner() as s:
        rows = await s.execute(
            text("SELECT * FROM audit_events WHERE target_type = 'provider_key' ORDER BY id")
        )
        return [dict(r) for r in rows.mappings()]


async def put(api: Api, provider: str, body: dict[str, Any], **who: Any) -> Any:
    return await api.client.put(f"{KEYS}/{provider}", json=body, headers=auth(**who))


async def test_put_get_delete_show_only_the_last_4(api: Api, database: Database) -> None:
    r = await api.client.get(KEYS, headers=auth())
    assert r.status_code == 200 and r.json() == {"keys": []}
    r = await put(
        api, "openai", {"apiKey": f"  {OPENAI_KEY} ", "baseUrl": "http://127.0.0.1:9/v1/"}
    )
    assert r.status_code == 200, r.text
    shown = r.json()
    assert set(shown) == {"provider", "last4", "baseUrl", "keyId", "updatedAt"}
    assert shown["provider"] == "openai" and shown["last4"] == "WXYZ"
    assert shown["baseUrl"] == "http://127.0.0.1:9/v1" and shown["keyId"] == "kid1"
    r = await put(api, "gemini", {"apiKey": GEMINI_KEY})
    assert r.status_code == 200 and r.json()["baseUrl"] is None
    listed = await api.client.get(KEYS, headers=auth())
    assert [(k["provider"], k["last4"]) for k in listed.json()["keys"]] == [
        ("gemini", "LAST"),
        ("openai", "WXYZ"),
    ]
    for secret in (OPENAI_KEY, GEMINI_KEY):
        assert secret not in listed.text and secret[:-4] not in r.text
    # another tenant sees none of it
    assert (await api.client.get(KEYS, headers=auth("mallory"))).json() == {"keys": []}

    r = await api.client.delete(f"{KEYS}/gemini", headers=auth())
    assert r.status_code == 204
    r = await api.client.delete(f"{KEYS}/gemini", headers=auth())
    assert r.status_code == 404 and error_of(r)["field"] == "provider"
    assert [k["provider"] for k in (await api.client.get(KEYS, headers=auth())).json()["keys"]] == [
        "openai"
    ]

    audit = await audit_rows(database)
    assert [(a["action"], a["target_id"], a["actor_id"]) for a in audit] == [
        ("provider_key.updated", "openai", "alice"),
        ("provider_key.updated", "gemini", "alice"),
        ("provider_key.deleted", "gemini", "alice"),
    ]
    assert audit[0]["before"] is None
    assert audit[0]["after"] == {
        "provider": "openai",
        "last4": "WXYZ",
        "baseUrl": "http://127.0.0.1:9/v1",
    }
    assert audit[2]["before"] == {"provider": "gemini", "last4": "LAST", "baseUrl": None}
    dumped = json.dumps(audit, default=str)
    assert OPENAI_KEY not in dumped and GEMINI_KEY not in dumped


async def test_replacing_a_key_reseals_it_and_audits_before_and_after(
    api: Api, database: Database
) -> None:
    assert (await put(api, "openai", {"apiKey": OPENAI_KEY})).status_code == 200
    first = (await raw_rows(database))[0]
    r = await put(api, "openai", {"apiKey": "sk-second-key-abcdefgh1234"})
    assert r.status_code == 200 and r.json()["last4"] == "1234"
    second = (await raw_rows(database))[0]
    assert second["nonce"] != first["nonce"] and second["updated_at"] > first["updated_at"]
    audit = await audit_rows(database)
    assert audit[-1]["before"]["last4"] == "WXYZ" and audit[-1]["after"]["last4"] == "1234"


async def test_the_stored_row_is_ciphertext_bound_to_tenant_and_provider(
    api: Api, database: Database
) -> None:
    assert (await put(api, "openai", {"apiKey": OPENAI_KEY})).status_code == 200
    assert (await put(api, "openai", {"apiKey": OPENAI_KEY}, user="mallory")).status_code == 200
    rows = await raw_rows(database)
    assert [(r["tenant_id"], r["provider"]) for r in rows] == [
        ("acme", "openai"),
        ("evil", "openai"),
    ]
    secret = OPENAI_KEY.encode()
    for row in rows:
        stored = bytes(row["ciphertext"]) + bytes(row["nonce"])
        assert secret not in stored and secret[:-4] not in stored
        assert base64.b64encode(secret) not in base64.b64encode(stored)
        assert OPENAI_KEY not in json.dumps({k: str(v) for k, v in row.items()})
        assert row["last4"] == "WXYZ" and row["key_id"] == "kid1"
    ring = Keyring.parse(f"kid1:{K1}")
    acme, evil = (Sealed(r["key_id"], bytes(r["nonce"]), bytes(r["ciphertext"])) for r in rows)
    assert ring.open(acme, aad("acme", "openai")) == OPENAI_KEY
    # the same key in another tenant's row: different ciphertext, and neither opens as the other
    assert acme.ciphertext != evil.ciphertext
    with pytest.raises(SecretsKeyError):
        ring.open(acme, aad("evil", "openai"))
    with pytest.raises(SecretsKeyError):
        ring.open(acme, aad("acme", "gemini"))
    # a ciphertext moved into another tenant's row does not decrypt for that tenant
    async with database.owner() as s:
        await s.execute(
            text(
                "UPDATE tenant_provider_keys SET nonce = :n, ciphertext = :c WHERE tenant_id = 'evil'"
            ),
            {"n": acme.nonce, "c": acme.ciphertext},
        )
    moved = (await raw_rows(database))[1]
    with pytest.raises(SecretsKeyError, match="moved from another row"):
        ring.open(
            Sealed("kid1", bytes(moved["nonce"]), bytes(moved["ciphertext"])), aad("evil", "openai")
        )


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
async def test_members_may_not_see_or_change_keys(
    api: Api, database: Database, method: str
) -> None:
    assert (await put(api, "openai", {"apiKey": OPENAI_KEY})).status_code == 200
    path = KEYS if method == "GET" else f"{KEYS}/openai"
    body = {"apiKey": "sk-member-key-0123456789"} if method == "PUT" else None
    r = await api.client.request(
        method, path, json=body, headers=auth("bob", tenant="acme", role="member")
    )
    assert r.status_code == 403 and error_of(r)["code"] == "forbidden_role"
    assert [r["last4"] for r in await raw_rows(database)] == ["WXYZ"]
    # an admin (not owner) may
    r = await api.client.request(
        method, path, json=body, headers=auth("carol", tenant="acme", role="admin")
    )
    assert r.status_code in (200, 204), r.text


async def test_members_cannot_read_the_rows_under_rls(api: Api, database: Database) -> None:
    from app.auth.principal import Principal

    assert (await put(api, "openai", {"apiKey": OPENAI_KEY})).status_code == 200
    member = Principal(user_id="bob", tenant_id="acme", role="member")
    async with database.tenant(member) as s:
        assert (await s.execute(text("SELECT count(*) FROM tenant_provider_keys"))).scalar() == 0
    async with database.tenant(member.as_service()) as s:
        assert (await s.execute(text("SELECT count(*) FROM tenant_provider_keys"))).scalar() == 1


@pytest.mark.parametrize(
    ("path", "body", "field", "says"),
    [
        ("anthropic", {"apiKey": OPENAI_KEY}, "provider", ""),
        ("openai", {"apiKey": "sk-q7Z"}, "apiKey", ""),
        ("openai", {"apiKey": "sk-has whitespace-inside"}, "apiKey", "whitespace"),
        ("openai", {}, "apiKey", ""),
        ("openai", {"apiKey": OPENAI_KEY, "baseUrl": "http://example.com/v1"}, "baseUrl", "https"),
        ("openai", {"apiKey": OPENAI_KEY, "baseUrl": "ftp://example.com"}, "baseUrl", "ftp"),
        (
            "openai",
            {"apiKey": OPENAI_KEY, "baseUrl": "https://user:pw@example.com"},
            "baseUrl",
            "credentials",
        ),
        ("openai", {"apiKey": OPENAI_KEY, "baseUrl": "https://10.0.0.5/v1"}, "baseUrl", "private"),
        (
            "gemini",
            {"apiKey": OPENAI_KEY, "baseUrl": "https://169.254.169.254"},
            "baseUrl",
            "169.254.169.254",
        ),
        ("gemini", {"apiKey": OPENAI_KEY, "baseUrl": "https://[::1]:8080"}, "baseUrl", "loopback"),
        ("gemini", {"apiKey": OPENAI_KEY, "baseUrl": "https://0xa.1"}, "baseUrl", "10.0.0.1"),
        ("gemini", {"apiKey": OPENAI_KEY, "baseUrl": "https://x.test/?k=1"}, "baseUrl", "query"),
    ],
)
async def test_bad_input_is_a_clear_422(
    api: Api, database: Database, path: str, body: dict[str, Any], field: str, says: str
) -> None:
    r = await api.client.put(f"{KEYS}/{path}", json=body, headers=auth())
    assert r.status_code == 422, r.text
    error = error_of(r)
    assert error["field"] == field and says in error["message"]
    assert body.get("apiKey", "sk-q7Z") not in r.text  # the (rejected) key is never echoed
    assert await raw_rows(database) == []


async def test_without_secrets_key_put_is_503_and_the_rest_works(
    db_url: str, database: Database
) -> None:
    async with running_api(make_settings(db_url), database) as api:
        r = await put(api, "openai", {"apiKey": OPENAI_KEY})
        assert r.status_code == 503
        error = error_of(r)
        assert error["code"] == "secrets_key_missing" and "set SECRETS_KEY" in error["message"]
        assert OPENAI_KEY not in r.text
        assert (await api.client.get(KEYS, headers=auth())).json() == {"keys": []}
        assert (
            await api.client.get("/api/agent-runtime/policies", headers=auth())
        ).status_code == 200
    assert await raw_rows(database) == []


async def test_rotation_with_the_reencrypt_command(
    api: Api,
    database: Database,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (await put(api, "openai", {"apiKey": OPENAI_KEY})).status_code == 200
    assert (await put(api, "gemini", {"apiKey": GEMINI_KEY}, user="mallory")).status_code == 200
    # the other sealed secrets rotate with the provider keys, in the same transaction
    tool = {
        "description": "Look an order up.",
        "parameters": {"type": "object"},
        "url": "https://orders.example.com/lookup",
        "headers": {"Authorization": "Bearer orders-0123456789"},
    }
    created = await api.client.put(
        "/api/agent-runtime/http-tools/lookup", json=tool, headers=auth()
    )
    assert created.status_code == 201, created.text
    server = {
        "transport": "http",
        "url": "http://127.0.0.1:9/mcp",
        "headers": {"Authorization": "Bearer mcp-0123456789"},
    }
    attached = await api.client.put(
        "/api/agent-runtime/mcp-servers/docs", json=server, headers=auth()
    )
    assert attached.status_code in (200, 201), attached.text
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("AGENT_RUNTIME_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("SECRETS_KEY", f"kid2:{K2},kid1:{K1}")  # new key first, old kept

    def reencrypt() -> tuple[int, str]:
        code = cli.main(["secrets", "reencrypt"])
        return code, capsys.readouterr().out

    code, out = await asyncio.to_thread(reencrypt)
    assert code == 0, out
    assert "provider keys: 2 stored, 2 re-encrypted under 'kid2', 0 already current" in out
    assert "http tools: 1 stored, 1 re-encrypted under 'kid2', 0 already current" in out
    assert "mcp servers: 1 stored, 1 re-encrypted under 'kid2', 0 already current" in out
    rows = await raw_rows(database)
    assert [r["key_id"] for r in rows] == ["kid2", "kid2"]
    code, out = await asyncio.to_thread(reencrypt)  # idempotent
    assert code == 0 and "2 stored, 0 re-encrypted under 'kid2', 2 already current" in out
    # the old key removed: everything still decrypts under the new one alone
    only_new = Keyring.parse(f"kid2:{K2}")
    opened = [
        only_new.open(
            Sealed(r["key_id"], bytes(r["nonce"]), bytes(r["ciphertext"])),
            aad(r["tenant_id"], r["provider"]),
        )
        for r in rows
    ]
    assert opened == [OPENAI_KEY, GEMINI_KEY]
    listed = await api.client.get(KEYS, headers=auth())
    assert listed.json()["keys"][0]["keyId"] == "kid2"
    # a keyring missing the key a row needs: the command changes nothing and says why
    monkeypatch.setenv("SECRETS_KEY", f"kid3:{K1}")
    code = await asyncio.to_thread(cli.main, ["secrets", "reencrypt"])
    err = capsys.readouterr().err
    assert code != 0 and "nothing was changed" in err and "'kid2'" in err
    assert K1 not in err and K2 not in err
    assert [r["key_id"] for r in await raw_rows(database)] == ["kid2", "kid2"]
