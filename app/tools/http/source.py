"""The tenant HTTP tools as a tool source (`app/tools/sources.py`).

Each `tools_for` reads the tenant's rows for the run's agent (one indexed query, as the tenant's
service principal: a member's `/tools` shows what their runs get) and builds an `HttpTool` per
row. Decrypted secrets are cached per row version (the nonces change with every seal), so a
busy tenant costs one query per run and no decryption. A row whose secrets do not decrypt (no
SECRETS_KEY, a key id SECRETS_KEY no longer holds, a tampered row) is `Unavailable`, never an
error of the run.
"""

from __future__ import annotations

from typing import cast
from uuid import UUID

import structlog

from app.auth.principal import Principal
from app.config import Settings
from app.db.engine import Database
from app.db.models import TenantHttpTool
from app.tenants.crypto import Keyring, SecretsKeyError, keyring_from_settings
from app.tools.http.definition import Method, Risk
from app.tools.http.store import OpenedSecrets, open_secrets, tools_for_agent
from app.tools.http.tool import Endpoint, HttpTool
from app.tools.sources import SourcedTools, Unavailable

log = structlog.get_logger(__name__)

SOURCE = "http"
NAMES = "<http tools>"
"""Matches no tool name (names are `[a-z0-9_]`): when the whole source fails, a call of one of
its tools is "unknown", not blamed on it by pattern; `/tools` still lists the failure."""
_CACHE_SIZE = 4096

_CacheKey = tuple[str, UUID, bytes, bytes | None]


class HttpToolSource:
    """The tenants' HTTP tools (see the module doc)."""

    name = SOURCE
    names = NAMES

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._keyring: Keyring | None = None
        self._opened: dict[_CacheKey, OpenedSecrets] = {}

    async def tools_for(
        self, db: Database, principal: Principal, agent_id: UUID | None
    ) -> SourcedTools:
        """The tenant's tools for a run of `agent_id` (the tenant-wide ones and the agent's)."""
        async with db.tenant(principal.as_service()) as s:
            rows = await tools_for_agent(s, agent_id)
        found = SourcedTools()
        for row in rows:
            try:
                opened = self._open(row)
            except SecretsKeyError as exc:
                log.warning("http tool secrets do not decrypt", tool=row.name, error=str(exc))
                reason = f"its stored secrets cannot be decrypted: {exc}"
                found.unavailable.append(Unavailable(SOURCE, row.name, reason))
                continue
            found.tools.append(tool_of(row, opened))
        return found

    async def aclose(self) -> None:
        """Nothing to release: every call opens its own connection."""
        self._opened.clear()

    def _open(self, row: TenantHttpTool) -> OpenedSecrets:
        key = (row.tenant_id, row.id, row.secret_nonce, row.headers_nonce)
        opened = self._opened.get(key)
        if opened is None:
            opened = open_secrets(self._keyring_or_refuse(), row)
            if len(self._opened) >= _CACHE_SIZE:
                self._opened.clear()
            self._opened[key] = opened
        return opened

    def _keyring_or_refuse(self) -> Keyring:
        if self._keyring is None:
            keyring = keyring_from_settings(self.settings)
            if keyring is None:
                raise SecretsKeyError("SECRETS_KEY is not set on this deployment")
            self._keyring = keyring
        return self._keyring


def tool_of(row: TenantHttpTool, opened: OpenedSecrets) -> HttpTool:
    """The tool a row describes."""
    return HttpTool(
        name=row.name,
        description=row.description,
        parameters=row.parameters,
        risk=cast(Risk, row.risk),
        endpoint=Endpoint(
            url=row.url,
            method=cast(Method, row.method),
            timeout_seconds=row.timeout_seconds,
            headers=opened.headers,
            signing_secret=opened.signing_secret,
        ),
    )


def http_tool_source(settings: Settings) -> HttpToolSource:
    """The source `app/tools/catalog.py` wires in."""
    return HttpToolSource(settings)
