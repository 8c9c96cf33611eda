"""The secrets keyring (app/tenants/crypto.py): AES-GCM sealing bound to associated data, key ids
and rotation, SECRETS_KEY parsing, and the key generated into the data dir on the embedded
default."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest
from pydantic import SecretStr

from app.cli.server_commands import with_secrets_key
from app.config import Settings
from app.logging import redact_text
from app.serve import child_env
from app.tenants.crypto import (
    KEY_FILE,
    Keyring,
    Sealed,
    SecretsKeyError,
    default_key_id,
    keyring_from_settings,
)
from app.tenants.provider_keys import aad

K1 = bytes(range(32))
K2 = bytes(range(100, 132))
B1 = base64.b64encode(K1).decode()
B2 = base64.b64encode(K2).decode()
SECRET = "sk-tenant-secret-value-0123456789"


def test_seal_open_round_trip_with_fresh_nonces() -> None:
    ring = Keyring.parse(f"kid1:{B1}")
    a = ring.seal(SECRET, aad("acme", "openai"))
    b = ring.seal(SECRET, aad("acme", "openai"))
    assert a.key_id == "kid1" and len(a.nonce) == 12
    assert a.nonce != b.nonce and a.ciphertext != b.ciphertext
    assert SECRET.encode() not in a.ciphertext
    assert base64.b64encode(SECRET.encode()) not in base64.b64encode(a.ciphertext)
    assert len(a.ciphertext) == len(SECRET) + 16  # the GCM tag
    assert ring.open(a, aad("acme", "openai")) == SECRET


@pytest.mark.parametrize(
    ("tenant", "provider"), [("evil", "openai"), ("acme", "gemini"), ("acme\0openai", "")]
)
def test_another_tenant_or_provider_cannot_open_it(tenant: str, provider: str) -> None:
    ring = Keyring.parse(f"kid1:{B1}")
    sealed = ring.seal(SECRET, aad("acme", "openai"))
    with pytest.raises(SecretsKeyError, match="moved from another row, or tampered"):
        ring.open(sealed, aad(tenant, provider))


def test_a_tampered_ciphertext_or_nonce_fails() -> None:
    ring = Keyring.parse(f"kid1:{B1}")
    sealed = ring.seal(SECRET, aad("acme", "openai"))
    flipped = bytes([sealed.ciphertext[0] ^ 1]) + sealed.ciphertext[1:]
    for bad in (
        Sealed(sealed.key_id, sealed.nonce, flipped),
        Sealed(sealed.key_id, bytes(12), sealed.ciphertext),
    ):
        with pytest.raises(SecretsKeyError):
            ring.open(bad, aad("acme", "openai"))


def test_rotation_first_key_seals_all_open_then_old_key_removed() -> None:
    old = Keyring.parse(f"kid1:{B1}")
    sealed = old.seal(SECRET, aad("acme", "gemini"))
    rotated = Keyring.parse(f"kid2:{B2}, kid1:{B1}")
    assert rotated.current_id == "kid2" and rotated.key_ids == ["kid2", "kid1"]
    assert rotated.open(sealed, aad("acme", "gemini")) == SECRET
    fresh = rotated.reseal(sealed, aad("acme", "gemini"))
    assert fresh is not None and fresh.key_id == "kid2"
    assert rotated.reseal(fresh, aad("acme", "gemini")) is None  # already current
    only_new = Keyring.parse(f"kid2:{B2}")
    assert only_new.open(fresh, aad("acme", "gemini")) == SECRET
    with pytest.raises(SecretsKeyError, match="key id 'kid1', which SECRETS_KEY no longer"):
        only_new.open(sealed, aad("acme", "gemini"))


def test_a_bare_key_gets_an_id_from_its_hash() -> None:
    ring = Keyring.parse(B1)
    assert ring.current_id == default_key_id(K1) and ring.current_id.startswith("k")
    assert len(ring.current_id) == 9


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "at least one key"),
        ("kid1:not base64!", "entry 1 is not base64"),
        (f"kid1:{base64.b64encode(b'short').decode()}", "is 5 bytes; it must be 32"),
        (f"kid1:{B1},kid1:{B2}", "duplicate key ids"),
        (f"bad id:{B1}", "a key id is letters"),
    ],
)
def test_malformed_secrets_key_is_refused_without_echoing_it(text: str, message: str) -> None:
    with pytest.raises(SecretsKeyError, match=message) as caught:
        Keyring.parse(text)
    assert B1 not in str(caught.value) and B2 not in str(caught.value)


def test_embedded_default_generates_a_private_key_file_once(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, database_url=None, agent_runtime_data_dir=tmp_path / "d")  # type: ignore[call-arg]
    first = keyring_from_settings(settings)
    assert first is not None
    path = tmp_path / "d" / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    kid, _, encoded = path.read_text().strip().partition(":")
    assert first.current_id == kid and len(base64.b64decode(encoded)) == 32
    sealed = first.seal(SECRET, b"x")
    second = keyring_from_settings(settings)  # the same key, read back
    assert second is not None and second.open(sealed, b"x") == SECRET
    assert redact_text(f"key {encoded}") == "key ***"  # registered with the log masker
    os.chmod(path, 0o644)
    keyring_from_settings(settings)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_real_database_without_secrets_key_has_no_keyring(tmp_path: Path) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, database_url="postgresql://db/x", agent_runtime_data_dir=tmp_path
    )
    assert keyring_from_settings(settings) is None
    assert not (tmp_path / KEY_FILE).exists()
    configured = settings.model_copy(update={"secrets_key": SecretStr(f"kid2:{B2},kid1:{B1}")})
    ring = keyring_from_settings(configured)
    assert ring is not None and ring.key_ids == ["kid2", "kid1"]
    assert redact_text(f"{B1} {B2}") == "*** ***"


def test_processes_on_the_embedded_database_carry_the_generated_key(tmp_path: Path) -> None:
    """`api`/`worker` resolve the key before DATABASE_URL becomes the embedded server's URL, and
    `serve` hands it to its children, so every process seals and opens with the same key."""
    embedded = Settings(_env_file=None, database_url=None, agent_runtime_data_dir=tmp_path)  # type: ignore[call-arg]
    resolved = with_secrets_key(embedded)
    assert resolved.secrets_key is not None
    text = resolved.secrets_key.get_secret_value()
    assert text == (tmp_path / KEY_FILE).read_text().strip()
    child = resolved.model_copy(update={"database_url": "postgresql://embedded/x"})
    ring = keyring_from_settings(child)
    assert ring is not None and ring.key_ids == [text.partition(":")[0]]
    env = child_env(embedded, "postgresql://embedded/x", "jwt", embedded=True, secrets_key=text)
    assert env["SECRETS_KEY"] == text
    external = embedded.model_copy(update={"database_url": "postgresql://db/x"})
    assert with_secrets_key(external).secrets_key is None
    assert "SECRETS_KEY" not in child_env(external, "postgresql://db/x", "jwt")
