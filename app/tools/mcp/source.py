"""The MCP tool source: the tools of the MCP servers a run's tenant and agent have attached.

`mcp_tool_source(settings)` is what `app.tools.catalog.TOOL_SOURCES` builds, once per worker
process (and once per API app, for `/tools`). It keeps a pool of connections keyed by (tenant,
server name, configuration version), so a changed configuration gets a fresh connection and the
old one is closed; connections unused for MCP_IDLE_SECONDS are closed by a reaper task, and
`aclose` closes them all (stopping stdio servers).

Each run reads the tenant's servers (as the tenant's service principal: members' runs get the
tools too, though only admins may read the configuration) and asks every server concurrently
for its tools (cached per connection, see `connection.py`). A server that cannot be reached is
listed as `Unavailable("mcp:<server>", "mcp__<server>__*", reason)`; its last known tools, if
any, are still offered, and calling one reconnects or fails with a `ToolError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any
from uuid import UUID

import mcp_types as types
import structlog

from app.auth.principal import Principal
from app.config import Settings
from app.db.engine import Database
from app.tenants.crypto import Keyring, SecretsKeyError, keyring_from_settings
from app.tenants.provider_keys import SecretsUnavailableError
from app.tools.base import ToolError
from app.tools.mcp.config import ServerConfig
from app.tools.mcp.connection import McpConnection
from app.tools.mcp.store import load_servers
from app.tools.mcp.tools import server_tools
from app.tools.mcp.transports import McpUnavailableError
from app.tools.sources import SourcedTools, Unavailable

log = structlog.get_logger(__name__)

Key = tuple[str, str, int]


class McpToolSource:
    """Tools of tenants' MCP servers, over a per-process connection pool."""

    name = "mcp"
    names = "mcp__*"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._connections: dict[Key, McpConnection] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._reaper: asyncio.Task[None] | None = None
        self._keyring: Keyring | None = None
        self._keyring_error: str | None = None
        self._keyring_loaded = False

    async def tools_for(
        self, db: Database, principal: Principal, agent_id: UUID | None
    ) -> SourcedTools:
        """The tools of the tenant's and the agent's enabled servers (see the module doc)."""
        async with db.tenant(principal.as_service()) as s:
            loaded = await load_servers(s, principal.tenant_id, agent_id, self._get_keyring)
        answers = await asyncio.gather(*(self._tools_of(c) for c in loaded.servers))
        merged = SourcedTools(
            unavailable=[
                Unavailable(f"mcp:{name}", f"mcp__{name}__*", reason)
                for name, reason in loaded.broken
            ]
        )
        for answer in answers:
            merged.tools.extend(answer.tools)
            merged.unavailable.extend(answer.unavailable)
        return merged

    def connection(self, config: ServerConfig) -> McpConnection:
        """The pool's connection for `config` (created, not yet opened, when new); connections
        to older versions of the same server are closed. `McpUnavailableError` when a newer
        version is pooled already (a run listed the tools before the change)."""
        found = self._connections.get(config.key)
        if found is not None:
            return found
        same = [k for k in self._connections if k[:2] == config.key[:2]]
        if any(k[2] > config.version for k in same):
            raise McpUnavailableError(
                "its configuration changed after this run listed its tools; the next run gets "
                "the new one"
            )
        for key in same:
            self._close_later(self._connections.pop(key))
        conn = McpConnection(config, self.settings)
        self._connections[config.key] = conn
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap(), name="mcp-reaper")
        return conn

    def find(self, tenant_id: str, name: str) -> McpConnection | None:
        """The newest pooled connection of a tenant's server, if any (for its status)."""
        found = [c for k, c in self._connections.items() if k[:2] == (tenant_id, name)]
        return max(found, key=lambda c: c.config.version, default=None)

    async def aclose(self) -> None:
        """Close every connection (stopping stdio servers) and the reaper."""
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.gather(self._reaper, return_exceptions=True)
            self._reaper = None
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)
        await asyncio.gather(*self._closing, return_exceptions=True)

    async def call(
        self, config: ServerConfig, name: str, args: dict[str, Any]
    ) -> types.CallToolResult:
        """Call `config`'s tool `name` through the pool (reconnecting a connection that was
        closed as idle since the run listed it)."""
        try:
            conn = self.connection(config)
        except McpUnavailableError as exc:
            raise ToolError(f"MCP server {config.name!r} is unavailable: {exc}") from None
        return await conn.call(name, args)

    async def _tools_of(self, config: ServerConfig) -> SourcedTools:
        timeout = self.settings.mcp_call_timeout_seconds

        async def call(name: str, args: dict[str, Any]) -> types.CallToolResult:
            return await self.call(config, name, args)

        try:
            conn = self.connection(config)
            listed = await conn.list_tools()
        except McpUnavailableError as exc:
            known = self._connections.get(config.key)
            cached = [] if known is None else known.tools or []
            tools, clashes = server_tools(config, cached, call, timeout)
            return SourcedTools(
                tools, [Unavailable(config.origin, config.pattern, str(exc)), *clashes]
            )
        tools, clashes = server_tools(config, listed, call, timeout)
        return SourcedTools(tools, clashes)

    def _get_keyring(self) -> Keyring | None:
        if not self._keyring_loaded:
            try:
                self._keyring = keyring_from_settings(self.settings)
            except SecretsKeyError as exc:
                self._keyring_error = f"SECRETS_KEY is invalid: {exc}"
            self._keyring_loaded = True
        if self._keyring_error is not None:
            raise SecretsUnavailableError(self._keyring_error)
        return self._keyring

    def _close_later(self, conn: McpConnection) -> None:
        task = asyncio.create_task(conn.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _reap(self) -> None:
        """Close connections unused for MCP_IDLE_SECONDS (checked every tenth of that)."""
        idle = self.settings.mcp_idle_seconds
        while self._connections:
            await asyncio.sleep(max(1.0, idle / 10))
            now = time.monotonic()
            for key, conn in list(self._connections.items()):
                unused = now - conn.last_used > idle and conn.calls == 0
                if unused and self._connections.get(key) is conn:
                    del self._connections[key]
                    with contextlib.suppress(Exception):
                        await conn.close()


def mcp_tool_source(settings: Settings) -> McpToolSource:
    """The MCP source of this process (`app.tools.catalog.TOOL_SOURCES`)."""
    return McpToolSource(settings)


__all__ = ["McpToolSource", "McpUnavailableError", "mcp_tool_source"]
