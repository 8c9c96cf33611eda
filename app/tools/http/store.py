"""The tenant HTTP tools as stored: admins' writes (audited, secrets sealed) and the runtime's read.

One row per tenant and name in `tenant_http_tools`. The headers (a JSON object) and the signing
secret are sealed by `crypto.Keyring`, each with associated data naming the tenant, the row's id
and which of the two it is, so a ciphertext moved to another row, tenant or column does not
decrypt. Writes record `http_tool.updated` (also for a rotated secret) / `http_tool.deleted`
audit events in the same transaction, with the public view only (header names, never values).
`reencrypt_all` moves every row to the current SECRETS_KEY entry (key rotation).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from sqlalchemy import ColumnElement, delete, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.audit.record import record_audit
from app.auth.principal import Principal
from app.db.models import TenantHttpTool
from app.logging import register_secret
from app.tenants.crypto import Keyring, Sealed, SecretsKeyError
from app.tenants.provider_keys import ReencryptCounts, SecretsUnavailableError
from app.tools.http.definition import HttpToolDefinition, shown_suffix
from app.tools.http.signing import new_secret


@dataclass(frozen=True, slots=True)
class HttpToolInfo:
    """What may be shown of a stored tool: never a header value nor the signing secret."""

    id: UUID
    name: str
    agent_id: UUID | None
    description: str
    parameters: dict[str, Any]
    url: str
    method: str
    timeout_seconds: float
    risk: str
    headers: dict[str, str | None]
    """Header name → the value's last 4 characters (None: too short to show any)."""
    secret_rotated_at: datetime
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: TenantHttpTool) -> HttpToolInfo:
        """The public view of a row."""
        return cls(
            id=row.id,
            name=row.name,
            agent_id=row.agent_id,
            description=row.description,
            parameters=row.parameters,
            url=row.url,
            method=row.method,
            timeout_seconds=row.timeout_seconds,
            risk=row.risk,
            headers=dict(row.header_hints),
            secret_rotated_at=row.secret_rotated_at,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )

    def audit(self) -> dict[str, Any]:
        """The fields an audit event records (header names only)."""
        return {
            "name": self.name,
            "agentId": None if self.agent_id is None else str(self.agent_id),
            "description": self.description,
            "parameters": self.parameters,
            "url": self.url,
            "method": self.method,
            "timeoutSeconds": self.timeout_seconds,
            "risk": self.risk,
            "headerNames": sorted(self.headers),
        }


@dataclass(frozen=True, slots=True)
class OpenedSecrets:
    """A row's decrypted headers and signing secret (left out of `repr`)."""

    headers: dict[str, str] = field(repr=False)
    signing_secret: str = field(repr=False)


def aad(tenant_id: str, tool_id: UUID, part: str) -> bytes:
    """The associated data binding a sealed `part` (`headers`, `secret`) to its tenant and row."""
    return b"\0".join((b"http-tool:v1", tenant_id.encode(), str(tool_id).encode(), part.encode()))


async def list_tools(s: AsyncSession) -> list[HttpToolInfo]:
    """The tenant's HTTP tools (RLS confines `s` to one tenant), by name."""
    rows = await s.scalars(select(TenantHttpTool).order_by(TenantHttpTool.name))
    return [HttpToolInfo.of(row) for row in rows]


async def get_tool(s: AsyncSession, name: str) -> HttpToolInfo | None:
    """The tenant's tool `name`."""
    row = await _row(s, name)
    return None if row is None else HttpToolInfo.of(row)


async def put_tool(
    s: AsyncSession, principal: Principal, keyring: Keyring, definition: HttpToolDefinition
) -> tuple[HttpToolInfo, str | None]:
    """Create or replace the tenant's tool `definition.name`; with the new signing secret when
    it was created (a replaced tool keeps its secret, and its headers when `headers` is None)."""
    row = await _row(s, definition.name, lock=True)
    created = row is None
    before = None if row is None else HttpToolInfo.of(row).audit()
    secret = None
    headers = definition.headers  # None: keep the stored ones
    if row is None:
        # the id is chosen here: the sealed values are bound to it
        row = TenantHttpTool(id=uuid4(), tenant_id=principal.tenant_id, name=definition.name)
        s.add(row)
        secret = new_secret()
        _seal_secret(row, keyring, secret)
        headers = headers or {}
    else:
        row.updated_at = func.now()
    row.agent_id = definition.agent_id
    row.description = definition.description
    row.parameters = definition.parameters
    row.url = definition.url
    row.method = definition.method
    row.timeout_seconds = definition.timeout_seconds
    row.risk = definition.risk
    if headers is not None:
        _seal_headers(row, keyring, headers)
    await s.flush()
    await s.refresh(row)
    info = HttpToolInfo.of(row)
    await record_audit(
        s,
        principal,
        "http_tool.updated",
        target_type="http_tool",
        target_id=definition.name,
        before=before,
        after=info.audit() | ({"secretRotated": True} if created else {}),
    )
    return info, secret


async def rotate_secret(
    s: AsyncSession, principal: Principal, keyring: Keyring, name: str
) -> tuple[HttpToolInfo, str] | None:
    """A new signing secret for tool `name` (None: no such tool); the old one stops at once."""
    row = await _row(s, name, lock=True)
    if row is None:
        return None
    before = HttpToolInfo.of(row).audit()
    secret = new_secret()
    _seal_secret(row, keyring, secret)
    row.secret_rotated_at = row.updated_at = func.now()
    await s.flush()
    await s.refresh(row)
    info = HttpToolInfo.of(row)
    await record_audit(
        s,
        principal,
        "http_tool.updated",
        target_type="http_tool",
        target_id=name,
        before=before,
        after=info.audit() | {"secretRotated": True},
    )
    return info, secret


async def delete_tool(s: AsyncSession, principal: Principal, name: str) -> bool:
    """Remove the tenant's tool `name`; False when there was none."""
    removed = await s.scalars(
        delete(TenantHttpTool).where(TenantHttpTool.name == name).returning(TenantHttpTool)
    )
    row = removed.one_or_none()
    if row is None:
        return False
    await record_audit(
        s,
        principal,
        "http_tool.deleted",
        target_type="http_tool",
        target_id=name,
        before=HttpToolInfo.of(row).audit(),
    )
    return True


async def tools_for_agent(s: AsyncSession, agent_id: UUID | None) -> list[TenantHttpTool]:
    """The rows a run of `agent_id` gets: the tenant-wide ones and that agent's (one query)."""
    scope: ColumnElement[bool] = TenantHttpTool.agent_id.is_(None)
    if agent_id is not None:
        scope = or_(scope, TenantHttpTool.agent_id == agent_id)
    return list(await s.scalars(select(TenantHttpTool).where(scope).order_by(TenantHttpTool.name)))


def open_secrets(keyring: Keyring, row: TenantHttpTool) -> OpenedSecrets:
    """The row's headers and signing secret, registered with the log masker.

    Raises `SecretsKeyError` when either does not decrypt under `keyring`."""
    secret = keyring.open(
        Sealed(row.secret_key_id, row.secret_nonce, row.secret_sealed),
        aad(row.tenant_id, row.id, "secret"),
    )
    headers: dict[str, str] = {}
    if row.headers_sealed is not None:
        assert row.headers_key_id is not None and row.headers_nonce is not None
        text = keyring.open(
            Sealed(row.headers_key_id, row.headers_nonce, row.headers_sealed),
            aad(row.tenant_id, row.id, "headers"),
        )
        headers = json.loads(text)
    for value in (secret, *headers.values()):
        register_secret(value)
    return OpenedSecrets(headers, secret)


async def _row(s: AsyncSession, name: str, *, lock: bool = False) -> TenantHttpTool | None:
    query = select(TenantHttpTool).where(TenantHttpTool.name == name)
    if lock:
        query = query.with_for_update()
    row: TenantHttpTool | None = await s.scalar(query)
    return row


def _seal_secret(row: TenantHttpTool, keyring: Keyring, secret: str) -> None:
    register_secret(secret)
    sealed = keyring.seal(secret, aad(row.tenant_id, row.id, "secret"))
    row.secret_key_id, row.secret_nonce, row.secret_sealed = (
        sealed.key_id,
        sealed.nonce,
        sealed.ciphertext,
    )


def _seal_headers(row: TenantHttpTool, keyring: Keyring, headers: dict[str, str]) -> None:
    row.header_hints = {name: shown_suffix(value) for name, value in sorted(headers.items())}
    if not headers:
        row.headers_key_id = row.headers_nonce = row.headers_sealed = None
        return
    for value in headers.values():
        register_secret(value)
    sealed = keyring.seal(json.dumps(headers), aad(row.tenant_id, row.id, "headers"))
    row.headers_key_id, row.headers_nonce, row.headers_sealed = (
        sealed.key_id,
        sealed.nonce,
        sealed.ciphertext,
    )


async def reencrypt_all(owner: AsyncSession, keyring: Keyring) -> ReencryptCounts:
    """Re-seal every tool's secrets, of every tenant, not under the current key (as the database
    owner; `agent-runtime secrets reencrypt`). Idempotent; rows are locked while re-sealed.

    Raises `SecretsUnavailableError` (nothing changed: the caller rolls back) when a row does
    not open under `keyring`."""
    rows = list(
        await owner.scalars(
            select(TenantHttpTool)
            .order_by(TenantHttpTool.tenant_id, TenantHttpTool.name)
            .with_for_update()
        )
    )
    changed = 0
    for row in rows:
        try:
            secret = keyring.reseal(
                Sealed(row.secret_key_id, row.secret_nonce, row.secret_sealed),
                aad(row.tenant_id, row.id, "secret"),
            )
            headers = None
            if row.headers_sealed is not None:
                assert row.headers_key_id is not None and row.headers_nonce is not None
                headers = keyring.reseal(
                    Sealed(row.headers_key_id, row.headers_nonce, row.headers_sealed),
                    aad(row.tenant_id, row.id, "headers"),
                )
        except SecretsKeyError as exc:
            raise SecretsUnavailableError(
                f"tenant {row.tenant_id!r}, HTTP tool {row.name}: {exc}"
            ) from None
        if secret is not None:
            row.secret_key_id, row.secret_nonce, row.secret_sealed = (
                secret.key_id,
                secret.nonce,
                secret.ciphertext,
            )
        if headers is not None:
            row.headers_key_id, row.headers_nonce, row.headers_sealed = (
                headers.key_id,
                headers.nonce,
                headers.ciphertext,
            )
        if secret is not None or headers is not None:
            changed += 1
    await owner.flush()
    return ReencryptCounts(total=len(rows), reencrypted=changed)
