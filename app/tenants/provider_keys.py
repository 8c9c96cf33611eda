"""A tenant's own model provider keys: stored encrypted, listed by their last 4 characters only.

One row per tenant and provider (`gemini`, `openai`) in `tenant_provider_keys`, the key sealed by
`crypto.Keyring` with associated data `provider-key:v1\\0<tenant>\\0<provider>` (a ciphertext
moved to another row does not decrypt). Writes record `provider_key.updated` / `.deleted` audit
events in the same transaction, with the last 4 characters and the base URL only.

`load_credentials` is the runtime's read: the tenant's decrypted keys, for the model layer
(`app.llm.credentials`), which never reads the database itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, get_args

from sqlalchemy import delete, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.audit.record import record_audit
from app.auth.principal import Principal
from app.db.models import TenantProviderKey
from app.logging import register_secret
from app.tenants.crypto import Keyring, Sealed, SecretsKeyError

Provider = Literal["gemini", "openai"]
PROVIDERS: tuple[str, ...] = get_args(Provider)


class SecretsUnavailableError(RuntimeError):
    """Provider keys cannot be sealed or opened: no SECRETS_KEY on this deployment, or a stored
    key does not decrypt under it. The message says what to do and holds no key material."""


@dataclass(frozen=True, slots=True)
class ProviderKeyInfo:
    """What may be shown of a stored key: never the key itself."""

    provider: str
    last4: str
    base_url: str | None
    key_id: str
    updated_at: datetime

    @classmethod
    def of(cls, row: TenantProviderKey) -> ProviderKeyInfo:
        """The public view of a row."""
        return cls(row.provider, row.last4, row.base_url, row.key_id, row.updated_at)

    def audit(self) -> dict[str, str | None]:
        """The fields an audit event records."""
        return {"provider": self.provider, "last4": self.last4, "baseUrl": self.base_url}


@dataclass(frozen=True, slots=True)
class StoredCredential:
    """A tenant's decrypted key for one provider (the key is left out of `repr`)."""

    provider: str
    api_key: str = field(repr=False)
    base_url: str | None


def aad(tenant_id: str, provider: str) -> bytes:
    """The associated data binding a sealed key to its tenant and provider."""
    return b"\0".join((b"provider-key:v1", tenant_id.encode(), provider.encode()))


def last4(api_key: str) -> str:
    """The last 4 characters shown for a key."""
    return api_key[-4:]


async def list_keys(s: AsyncSession) -> list[ProviderKeyInfo]:
    """The tenant's stored keys (RLS confines `s` to one tenant), by provider."""
    rows = await s.scalars(select(TenantProviderKey).order_by(TenantProviderKey.provider))
    return [ProviderKeyInfo.of(row) for row in rows]


async def put_key(
    s: AsyncSession,
    principal: Principal,
    keyring: Keyring,
    provider: str,
    api_key: str,
    base_url: str | None,
) -> ProviderKeyInfo:
    """Store (or replace) the tenant's key for `provider`, sealed under the current key."""
    before = await s.get(TenantProviderKey, (principal.tenant_id, provider))
    previous = ProviderKeyInfo.of(before).audit() if before is not None else None
    sealed = keyring.seal(api_key, aad(principal.tenant_id, provider))
    values = {
        "key_id": sealed.key_id,
        "nonce": sealed.nonce,
        "ciphertext": sealed.ciphertext,
        "last4": last4(api_key),
        "base_url": base_url,
    }
    statement = (
        insert(TenantProviderKey)
        .values(tenant_id=principal.tenant_id, provider=provider, **values)
        .on_conflict_do_update(
            index_elements=["tenant_id", "provider"],
            set_={**values, "updated_at": func.now()},
        )
        .returning(TenantProviderKey)
    )
    row = (await s.scalars(statement, execution_options={"populate_existing": True})).one()
    info = ProviderKeyInfo.of(row)
    await record_audit(
        s,
        principal,
        "provider_key.updated",
        target_type="provider_key",
        target_id=provider,
        before=previous,
        after=info.audit(),
    )
    return info


async def delete_key(s: AsyncSession, principal: Principal, provider: str) -> bool:
    """Remove the tenant's key for `provider`; False when there was none."""
    removed = await s.scalars(
        delete(TenantProviderKey)
        .where(TenantProviderKey.provider == provider)
        .returning(TenantProviderKey)
    )
    row = removed.one_or_none()
    if row is None:
        return False
    await record_audit(
        s,
        principal,
        "provider_key.deleted",
        target_type="provider_key",
        target_id=provider,
        before=ProviderKeyInfo.of(row).audit(),
    )
    return True


async def load_credentials(
    s: AsyncSession, tenant_id: str, get_keyring: Callable[[], Keyring | None]
) -> dict[str, StoredCredential]:
    """The tenant's decrypted keys by provider (empty when it stores none; `get_keyring` is
    called only when it stores some).

    Each key is registered with the log masker. Raises `SecretsUnavailableError` when keys are
    stored but cannot be opened (no keyring; a key id SECRETS_KEY no longer holds).
    """
    rows = list(await s.scalars(select(TenantProviderKey)))
    if not rows:
        return {}
    keyring = get_keyring()
    if keyring is None:
        raise SecretsUnavailableError(
            "this tenant stores its own provider keys, but SECRETS_KEY is not set on this "
            "deployment, so they cannot be decrypted"
        )
    found: dict[str, StoredCredential] = {}
    for row in rows:
        try:
            api_key = keyring.open(
                Sealed(row.key_id, row.nonce, row.ciphertext), aad(tenant_id, row.provider)
            )
        except SecretsKeyError as exc:
            raise SecretsUnavailableError(
                f"the tenant's {row.provider} key cannot be decrypted: {exc}"
            ) from None
        register_secret(api_key)
        found[row.provider] = StoredCredential(row.provider, api_key, row.base_url)
    return found


@dataclass(frozen=True, slots=True)
class ReencryptCounts:
    """What `reencrypt_all` did."""

    total: int
    reencrypted: int

    @property
    def current(self) -> int:
        """Rows that already were under the current key."""
        return self.total - self.reencrypted


async def reencrypt_all(owner: AsyncSession, keyring: Keyring) -> ReencryptCounts:
    """Re-seal every row of every tenant not under the current key (as the database owner).

    Idempotent: a second pass finds every row current. Rows are locked while re-sealed, so a
    concurrent PUT is not overwritten with the old key.
    """
    rows = list(
        await owner.scalars(
            select(TenantProviderKey)
            .order_by(TenantProviderKey.tenant_id, TenantProviderKey.provider)
            .with_for_update()
        )
    )
    changed = 0
    for row in rows:
        sealed = Sealed(row.key_id, row.nonce, row.ciphertext)
        try:
            fresh = keyring.reseal(sealed, aad(row.tenant_id, row.provider))
        except SecretsKeyError as exc:
            raise SecretsUnavailableError(
                f"tenant {row.tenant_id!r}, provider {row.provider}: {exc}"
            ) from None
        if fresh is None:
            continue
        row.key_id, row.nonce, row.ciphertext = fresh.key_id, fresh.nonce, fresh.ciphertext
        changed += 1
    await owner.flush()
    return ReencryptCounts(total=len(rows), reencrypted=changed)
