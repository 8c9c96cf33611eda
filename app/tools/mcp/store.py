"""A tenant's MCP servers in `tenant_mcp_servers`: list, store or replace, remove, load.

Header and environment values are sealed together as one JSON document by `crypto.Keyring`,
with associated data `mcp-server:v1\\0<tenant>\\0<name>` (a ciphertext moved to another row does
not decrypt); the `config` column holds only what may be shown. Writes record
`mcp_server.updated` / `.deleted` audit events in the same transaction, with the public view
only. Every write raises `version`, which the workers' connection pool is keyed by.

`load_servers` is the worker's read (as the tenant's service principal: RLS lets only admins and
the runtime see the table): the enabled servers of the tenant and of one agent, secrets opened.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import ColumnElement, delete, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.audit.record import record_audit
from app.auth.principal import Principal
from app.db.models import TenantMcpServer
from app.logging import register_secret
from app.tenants.crypto import Keyring, Sealed, SecretsKeyError
from app.tenants.provider_keys import ReencryptCounts, SecretsUnavailableError
from app.tools.mcp.config import ServerConfig, config_from_row


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What may be shown of a stored server: never its secret values."""

    name: str
    agent_id: UUID | None
    transport: str
    enabled: bool
    config: dict[str, Any]
    version: int
    key_id: str | None
    updated_by: str
    updated_at: datetime

    @classmethod
    def of(cls, row: TenantMcpServer) -> ServerInfo:
        """The public view of a row."""
        return cls(
            name=row.name,
            agent_id=row.agent_id,
            transport=row.transport,
            enabled=row.enabled,
            config=dict(row.config),
            version=row.version,
            key_id=row.key_id,
            updated_by=row.updated_by,
            updated_at=row.updated_at,
        )

    def audit(self) -> dict[str, Any]:
        """The fields an audit event records."""
        return {
            "name": self.name,
            "agentId": None if self.agent_id is None else str(self.agent_id),
            "transport": self.transport,
            "enabled": self.enabled,
            **self.config,
        }


def aad(tenant_id: str, name: str) -> bytes:
    """The associated data binding sealed secrets to their tenant and server."""
    return b"\0".join((b"mcp-server:v1", tenant_id.encode(), name.encode()))


async def list_servers(s: AsyncSession) -> list[ServerInfo]:
    """The tenant's servers (RLS confines `s` to one tenant), by name."""
    rows = await s.scalars(select(TenantMcpServer).order_by(TenantMcpServer.name))
    return [ServerInfo.of(row) for row in rows]


async def get_server(s: AsyncSession, tenant_id: str, name: str) -> ServerInfo | None:
    """One server of the tenant, if stored."""
    row = await s.get(TenantMcpServer, (tenant_id, name))
    return None if row is None else ServerInfo.of(row)


async def stored_secrets(
    s: AsyncSession, tenant_id: str, name: str, keyring: Keyring | None
) -> dict[str, dict[str, str]]:
    """The stored header and env values of a server (empty when none), to keep on a change that
    does not resend them."""
    row = await s.get(TenantMcpServer, (tenant_id, name))
    if row is None or row.ciphertext is None:
        return {}
    return _open(row, keyring)


async def put_server(
    s: AsyncSession, principal: Principal, keyring: Keyring | None, config: ServerConfig
) -> ServerInfo:
    """Store (or replace) `config` as the tenant's server `config.name`, secrets sealed."""
    row = await s.get(TenantMcpServer, (principal.tenant_id, config.name), with_for_update=True)
    before = None if row is None else ServerInfo.of(row).audit()
    secrets = {"headers": config.headers, "env": config.env}
    sealed: Sealed | None = None
    if config.headers or config.env:
        if keyring is None:
            raise SecretsUnavailableError("SECRETS_KEY is not set: secret values cannot be stored")
        sealed = keyring.seal(json.dumps(secrets), aad(principal.tenant_id, config.name))
    if row is None:
        row = TenantMcpServer(tenant_id=principal.tenant_id, name=config.name, version=1)
        s.add(row)
    else:
        row.version += 1
        row.updated_at = datetime.now().astimezone()
    row.agent_id = config.agent_id
    row.transport = config.transport
    row.enabled = config.enabled
    row.config = config.public()
    row.key_id = None if sealed is None else sealed.key_id
    row.nonce = None if sealed is None else sealed.nonce
    row.ciphertext = None if sealed is None else sealed.ciphertext
    row.updated_by = principal.user_id
    await s.flush()
    await s.refresh(row)
    info = ServerInfo.of(row)
    await record_audit(
        s,
        principal,
        "mcp_server.updated",
        target_type="mcp_server",
        target_id=config.name,
        before=before,
        after=info.audit(),
    )
    return info


async def delete_server(s: AsyncSession, principal: Principal, name: str) -> bool:
    """Remove the tenant's server `name`; False when there was none."""
    removed = await s.scalars(
        delete(TenantMcpServer).where(TenantMcpServer.name == name).returning(TenantMcpServer)
    )
    row = removed.one_or_none()
    if row is None:
        return False
    await record_audit(
        s,
        principal,
        "mcp_server.deleted",
        target_type="mcp_server",
        target_id=name,
        before=ServerInfo.of(row).audit(),
    )
    return True


@dataclass(frozen=True, slots=True)
class LoadedServers:
    """The servers a run gets, and the ones whose secrets could not be opened (name, reason)."""

    servers: list[ServerConfig]
    broken: list[tuple[str, str]]


async def load_servers(
    s: AsyncSession,
    tenant_id: str,
    agent_id: UUID | None,
    get_keyring: Callable[[], Keyring | None],
) -> LoadedServers:
    """The tenant's enabled servers for agent `agent_id` (tenant-wide ones and the agent's own),
    secrets opened and registered with the log masker (`get_keyring` is called only when one
    has secrets)."""
    scope: ColumnElement[bool] = TenantMcpServer.agent_id.is_(None)
    if agent_id is not None:
        scope = or_(scope, TenantMcpServer.agent_id == agent_id)
    rows = await s.scalars(
        select(TenantMcpServer).where(TenantMcpServer.enabled, scope).order_by(TenantMcpServer.name)
    )
    servers: list[ServerConfig] = []
    broken: list[tuple[str, str]] = []
    for row in rows:
        try:
            secrets = _open(row, get_keyring() if row.ciphertext is not None else None)
        except SecretsUnavailableError as exc:
            broken.append((row.name, str(exc)))
            continue
        servers.append(
            config_from_row(
                tenant_id,
                row.name,
                row.transport,
                row.version,
                row.agent_id,
                row.enabled,
                row.config,
                secrets,
            )
        )
    return LoadedServers(servers, broken)


def _open(row: TenantMcpServer, keyring: Keyring | None) -> dict[str, dict[str, str]]:
    """The opened secrets of `row` (each value registered with the log masker)."""
    if row.ciphertext is None or row.nonce is None or row.key_id is None:
        return {}
    if keyring is None:
        raise SecretsUnavailableError(
            "its header or env values are stored encrypted, but SECRETS_KEY is not set on this "
            "deployment"
        )
    try:
        text = keyring.open(
            Sealed(row.key_id, row.nonce, row.ciphertext), aad(row.tenant_id, row.name)
        )
    except SecretsKeyError as exc:
        raise SecretsUnavailableError(
            f"its header or env values cannot be decrypted: {exc}"
        ) from None
    opened: dict[str, dict[str, str]] = json.loads(text)
    for values in opened.values():
        for value in values.values():
            register_secret(value)
    return opened


async def reencrypt_servers(owner: AsyncSession, keyring: Keyring) -> ReencryptCounts:
    """Re-seal every server's secrets not under the current key, across tenants (as the database
    owner; for `agent-runtime secrets reencrypt`). Idempotent; rows are locked while re-sealed.
    `version` is left alone: the values did not change."""
    rows = list(
        await owner.scalars(
            select(TenantMcpServer)
            .where(TenantMcpServer.ciphertext.is_not(None))
            .order_by(TenantMcpServer.tenant_id, TenantMcpServer.name)
            .with_for_update()
        )
    )
    changed = 0
    for row in rows:
        assert row.key_id is not None and row.nonce is not None and row.ciphertext is not None
        try:
            fresh = keyring.reseal(
                Sealed(row.key_id, row.nonce, row.ciphertext), aad(row.tenant_id, row.name)
            )
        except SecretsKeyError as exc:
            raise SecretsUnavailableError(
                f"tenant {row.tenant_id!r}, MCP server {row.name!r}: {exc}"
            ) from None
        if fresh is None:
            continue
        row.key_id, row.nonce, row.ciphertext = fresh.key_id, fresh.nonce, fresh.ciphertext
        changed += 1
    await owner.flush()
    return ReencryptCounts(total=len(rows), reencrypted=changed)
