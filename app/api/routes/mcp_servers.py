"""A tenant's MCP servers (admins only): list, show (with status), attach or replace, remove.

Their tools reach the tenant's runs namespaced `mcp__<name>__<tool>` (`app/tools/mcp/`), where
policy, approvals and caps apply as to any tool. Header and env values are encrypted at rest and
never returned. See docs/tools.md, "MCP servers".
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from app.agents.store import get_agent
from app.api.deps import AdminPrincipal, DatabaseDep, JsonBody, SettingsDep
from app.api.errors import ApiError
from app.api.mcp_server_schemas import (
    McpServerBody,
    McpServerInfo,
    McpServerList,
    McpServerStatus,
)
from app.api.routes.tools import SourcesDep
from app.api.schemas import error_responses
from app.api.secret_routes import (
    ADMIN_ONLY,
    NO_SECRETS_KEY,
    SECRETS_KEY_MISSING,
    optional_keyring,
    sealing_keyring,
)
from app.config import Settings
from app.tenants.crypto import Keyring
from app.tenants.provider_keys import SecretsUnavailableError
from app.tools.base import ToolError
from app.tools.mcp import store
from app.tools.mcp.config import NAME_PATTERN, ServerConfig, name_problem
from app.tools.mcp.source import McpToolSource
from app.tools.mcp.transports import McpUnavailableError, check_server_address
from app.tools.sources import ToolSources

router = APIRouter(prefix="/api/agent-runtime", tags=["mcp servers"])

NamePath = Annotated[
    str,
    Path(
        description=f"The server's name ({NAME_PATTERN}, no `__`); its tools are "
        "`mcp__<name>__<tool>`.",
        max_length=64,
    ),
]
STDIO_DISABLED = "stdio_disabled"


def checked_name(name: str) -> str:
    """`name`, or a 422 saying what is wrong with it."""
    if (problem := name_problem(name)) is not None:
        raise ApiError(422, f"server name {name!r} {problem}", field="name")
    return name


def mcp_source(sources: ToolSources) -> McpToolSource | None:
    """The app's MCP source, if this deployment has one."""
    return next((s for s in sources.sources if isinstance(s, McpToolSource)), None)


def info(stored: store.ServerInfo, status: McpServerStatus | None = None) -> McpServerInfo:
    """The API view of a stored server."""
    config: dict[str, Any] = stored.config
    return McpServerInfo(
        name=stored.name,
        agent_id=stored.agent_id,
        transport="stdio" if stored.transport == "stdio" else "http",
        enabled=stored.enabled,
        url=config.get("url"),
        header_names=config.get("headerNames") or [],
        command=config.get("command"),
        args=config.get("args") or [],
        env_names=config.get("envNames") or [],
        risk=config.get("risk"),
        tool_risk=config.get("toolRisk") or {},
        timeout_seconds=config.get("timeoutSeconds"),
        tool_prefix=f"mcp__{stored.name}__",
        version=stored.version,
        updated_by=stored.updated_by,
        updated_at=stored.updated_at,
        status=status,
    )


@router.get(
    "/mcp-servers", response_model=McpServerList, responses=error_responses(401) | ADMIN_ONLY
)
async def list_mcp_servers(principal: AdminPrincipal, db: DatabaseDep) -> McpServerList:
    """The tenant's MCP servers (header and env names only, never their values)."""
    async with db.tenant(principal) as s:
        return McpServerList(servers=[info(x) for x in await store.list_servers(s)])


@router.get(
    "/mcp-servers/{name}",
    response_model=McpServerInfo,
    responses=error_responses(401, 404) | ADMIN_ONLY,
)
async def get_mcp_server(
    principal: AdminPrincipal,
    db: DatabaseDep,
    sources: SourcesDep,
    name: NamePath,
    check: Annotated[
        bool, Query(description="Connect and list its tools now (else: what is known).")
    ] = False,
) -> McpServerInfo:
    """One server, with this API process's connection status (`check=true`: connect now)."""
    async with db.tenant(principal) as s:
        stored = await store.get_server(s, principal.tenant_id, name)
    if stored is None:
        raise ApiError(404, f"no MCP server {name!r}", field="name")
    source = mcp_source(sources)
    if source is None:
        return info(stored)
    if check:
        # Through the source's own read: secrets opened exactly as a run would.
        await source.tools_for(db, principal, stored.agent_id)
    conn = source.find(principal.tenant_id, name)
    if conn is None or conn.config.version != stored.version:
        return info(stored, McpServerStatus(connected=False, last_error=None, tool_count=None))
    tools = None if conn.tools is None else len(conn.tools)
    return info(
        stored,
        McpServerStatus(connected=conn.connected, last_error=conn.last_error, tool_count=tools),
    )


@router.put(
    "/mcp-servers/{name}",
    response_model=McpServerInfo,
    responses=error_responses(400, 401, 415, 422) | ADMIN_ONLY | NO_SECRETS_KEY,
)
async def put_mcp_server(
    principal: AdminPrincipal,
    db: DatabaseDep,
    settings: SettingsDep,
    _json: JsonBody,
    name: NamePath,
    body: McpServerBody,
) -> McpServerInfo:
    """Attach (or replace) the server `name` for the tenant or one agent.

    422 `stdio_disabled` for a stdio server when the deployment does not enable them; 422 when
    the URL is refused by the address rules; 503 `secrets_key_missing` when header or env values
    cannot be encrypted.
    """
    checked_name(name)
    if body.transport == "stdio" and not settings.mcp_stdio_enabled:
        raise ApiError(
            422,
            "stdio MCP servers are disabled on this deployment (MCP_STDIO_ENABLED): attach an "
            "http server instead",
            code=STDIO_DISABLED,
            field="transport",
        )
    if body.url is not None:
        try:
            await check_server_address(body.url, settings)
        except (ToolError, McpUnavailableError, ValueError) as exc:
            reason = str(exc).removeprefix("refused: ")
            raise ApiError(422, f"url is refused: {reason}", field="url") from None
    keyring = _keyring(settings, needed=bool(body.headers or body.env))
    async with db.tenant(principal) as s:
        if body.agent_id is not None and await get_agent(s, body.agent_id) is None:
            raise ApiError(422, f"agent {body.agent_id} not found", field="agentId")
        kept: dict[str, dict[str, str]] = {}
        if body.headers is None or body.env is None:
            before = await store.get_server(s, principal.tenant_id, name)
            if before is not None and before.transport == body.transport and before.key_id:
                try:
                    kept = await store.stored_secrets(
                        s, principal.tenant_id, name, _keyring(settings, needed=True)
                    )
                except SecretsUnavailableError as exc:
                    raise ApiError(
                        422,
                        f"the stored values cannot be kept ({exc}): send them again",
                        field="headers",
                    ) from None
        config = ServerConfig(
            tenant_id=principal.tenant_id,
            name=name,
            transport=body.transport,
            version=0,
            agent_id=body.agent_id,
            enabled=body.enabled,
            url=None if body.url is None else body.url.strip(),
            command=body.command,
            args=tuple(body.args),
            risk=body.risk,
            tool_risk=dict(body.tool_risk),
            timeout_seconds=body.timeout_seconds,
            headers=body.headers if body.headers is not None else kept.get("headers", {}),
            env=body.env if body.env is not None else kept.get("env", {}),
        )
        try:
            stored = await store.put_server(s, principal, keyring, config)
        except SecretsUnavailableError as exc:
            raise ApiError(503, str(exc), code=SECRETS_KEY_MISSING) from None
    return info(stored)


@router.delete(
    "/mcp-servers/{name}", status_code=204, responses=error_responses(401, 404) | ADMIN_ONLY
)
async def delete_mcp_server(principal: AdminPrincipal, db: DatabaseDep, name: NamePath) -> Response:
    """Detach the server `name` (runs no longer get its tools)."""
    async with db.tenant(principal) as s:
        if not await store.delete_server(s, principal, name):
            raise ApiError(404, f"no MCP server {name!r}", field="name")
    return Response(status_code=204)


def _keyring(settings: Settings, *, needed: bool) -> Keyring | None:
    """The SECRETS_KEY keyring; 503 `secrets_key_missing` when `needed` and there is none."""
    if needed:
        return sealing_keyring(settings, "secret header or env values")
    return optional_keyring(settings)
