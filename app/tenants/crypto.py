"""Secrets at rest: AES-256-GCM under a keyring from `SECRETS_KEY`, with key ids for rotation.

`SECRETS_KEY` is `kid:base64` entries (32 bytes each), comma-separated; the first entry encrypts,
every entry decrypts, so a key rotates by putting the new one first, re-encrypting the stored
rows (`agent-runtime secrets reencrypt`) and then dropping the old one. A bare base64 key (no
`kid:`) gets the id `k` + the first 8 hex digits of its SHA-256.

Each value is sealed with a fresh 96-bit random nonce and associated data (`aad`) naming what it
belongs to (for provider keys: the tenant and the provider), so a ciphertext copied to another
row, or another tenant's, fails to decrypt instead of handing out someone else's secret.

Without `SECRETS_KEY`: on the embedded database (no DATABASE_URL) a key is generated into
`<AGENT_RUNTIME_DATA_DIR>/secrets-key` (mode 0600), like the JWT secret; with DATABASE_URL there
is no keyring (`keyring_from_settings` answers None) and nothing can be sealed or opened.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from app.auth.secret import ensure_secret_file
from app.config import Settings
from app.logging import register_secret

KEY_BYTES = 32
NONCE_BYTES = 12
KEY_FILE = "secrets-key"
_KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class SecretsKeyError(ValueError):
    """SECRETS_KEY is malformed, or a sealed value cannot be opened (unknown key id, wrong
    associated data, tampered ciphertext). The message never contains key material."""


@dataclass(frozen=True, slots=True)
class Sealed:
    """An encrypted value as stored: which key sealed it, its nonce and ciphertext (with tag)."""

    key_id: str
    nonce: bytes
    ciphertext: bytes


class Keyring:
    """Named AES-256-GCM keys; the first seals, any opens what it sealed."""

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        if not keys:
            raise SecretsKeyError("a keyring needs at least one key")
        ids = [kid for kid, _ in keys]
        if len(set(ids)) != len(ids):
            raise SecretsKeyError(f"duplicate key ids in SECRETS_KEY: {', '.join(ids)}")
        for kid, key in keys:
            if len(key) != KEY_BYTES:
                raise SecretsKeyError(
                    f"SECRETS_KEY entry {kid!r} is {len(key)} bytes; it must be {KEY_BYTES}"
                )
        self._ciphers = {kid: AESGCM(key) for kid, key in keys}
        self.current_id = ids[0]
        """The id of the key new values are sealed with."""

    @classmethod
    def parse(cls, text: str) -> Keyring:
        """The keyring `SECRETS_KEY` describes (`kid:base64,...` or one bare base64 key)."""
        keys: list[tuple[str, bytes]] = []
        for n, entry in enumerate(e.strip() for e in text.split(",")):
            if not entry:
                continue
            kid, sep, encoded = entry.rpartition(":")
            if sep and not _KEY_ID.match(kid):
                raise SecretsKeyError(
                    f"SECRETS_KEY entry {n + 1}: a key id is letters, digits, '.', '_' or '-'"
                )
            try:
                key = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise SecretsKeyError(
                    f"SECRETS_KEY entry {n + 1} is not base64 (expected kid:base64 of 32 bytes)"
                ) from None
            keys.append((kid if sep else default_key_id(key), key))
        return cls(keys)

    @property
    def key_ids(self) -> list[str]:
        """Every key id, the current one first."""
        return list(self._ciphers)

    def seal(self, plaintext: str, aad: bytes) -> Sealed:
        """`plaintext` encrypted under the current key, bound to `aad`."""
        nonce = os.urandom(NONCE_BYTES)
        data = self._ciphers[self.current_id].encrypt(nonce, plaintext.encode(), aad)
        return Sealed(self.current_id, nonce, data)

    def open(self, sealed: Sealed, aad: bytes) -> str:
        """The plaintext of `sealed`; `SecretsKeyError` unless its key is here and `aad` matches."""
        cipher = self._ciphers.get(sealed.key_id)
        if cipher is None:
            raise SecretsKeyError(
                f"the value was encrypted with key id {sealed.key_id!r}, which SECRETS_KEY no "
                f"longer holds (it has: {', '.join(self._ciphers)})"
            )
        try:
            return cipher.decrypt(sealed.nonce, sealed.ciphertext, aad).decode()
        except InvalidTag:
            raise SecretsKeyError(
                f"the value does not decrypt under key id {sealed.key_id!r} for this owner "
                "(moved from another row, or tampered with)"
            ) from None

    def reseal(self, sealed: Sealed, aad: bytes) -> Sealed | None:
        """`sealed` re-encrypted under the current key; None when it already is."""
        if sealed.key_id == self.current_id:
            return None
        return self.seal(self.open(sealed, aad), aad)


def default_key_id(key: bytes) -> str:
    """The id of a key given without one: `k` + 8 hex digits of its SHA-256."""
    return "k" + hashlib.sha256(key).hexdigest()[:8]


def generate_entry() -> str:
    """A new `kid:base64` SECRETS_KEY entry (32 random bytes)."""
    key = os.urandom(KEY_BYTES)
    return f"{default_key_id(key)}:{base64.b64encode(key).decode()}"


def key_file(settings: Settings) -> Path:
    """Where the generated key of the embedded database lives."""
    return settings.agent_runtime_data_dir / KEY_FILE


def secrets_key_text(settings: Settings) -> str | None:
    """SECRETS_KEY; on the embedded database without it, the generated key (created on first
    use); None with DATABASE_URL and no SECRETS_KEY.

    Processes started on the embedded database resolve this before they replace DATABASE_URL
    with the embedded server's URL (`serve` hands it to its children as SECRETS_KEY).
    """
    configured = settings.secrets_key.get_secret_value().strip() if settings.secrets_key else ""
    if configured:
        return configured
    if settings.database_url is None:
        return ensure_secret_file(key_file(settings), generate_entry)
    return None


def keyring_from_settings(settings: Settings) -> Keyring | None:
    """The keyring of `secrets_key_text(settings)` (None without one). Every key is registered
    with the log masker."""
    text = secrets_key_text(settings)
    if text is None:
        return None
    for entry in text.split(","):
        register_secret(entry.strip().rpartition(":")[2])
    return Keyring.parse(text)
