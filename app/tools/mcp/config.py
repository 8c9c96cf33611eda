"""What a tenant's MCP server is: its name, transport, where it is, and how risky its tools are.

`ServerConfig` is one stored server with its secrets opened (header and environment values),
as the worker connects to it; `ServerConfig.public()` is what may be shown and audited (their
names only). Names follow `NAME_PATTERN` and may not contain `__`, so a tool name
`mcp__<server>__<tool>` always says unambiguously which server it belongs to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal
from uuid import UUID

Transport = Literal["http", "stdio"]
Risk = Literal["low", "medium", "high"]
RISKS: tuple[str, ...] = ("low", "medium", "high")

NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
_NAME = re.compile(NAME_PATTERN)
HEADER_NAME_PATTERN = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$"
"""An HTTP header name (an RFC 9110 token)."""
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
RESERVED_HEADERS = frozenset(
    {"host", "content-length", "content-type", "accept", "connection", "transfer-encoding"}
    | {"mcp-session-id", "mcp-protocol-version", "last-event-id"}
)
"""Headers the MCP transport sets itself; a server's configuration may not override them."""


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a server (None: it can)."""
    if not _NAME.match(name):
        return (
            "must be 1-32 characters: a lowercase letter, then lowercase letters, digits, '_' "
            "or '-'"
        )
    if "__" in name:
        return "may not contain '__' (it separates the server from the tool in tool names)"
    return None


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One MCP server of a tenant, secrets opened (they are left out of `repr`)."""

    tenant_id: str
    name: str
    transport: Transport
    version: int
    """Raised by every change: connections are keyed by it, so a change reconnects."""
    agent_id: UUID | None = None
    enabled: bool = True
    url: str | None = None
    command: str | None = None
    args: tuple[str, ...] = ()
    risk: Risk | None = None
    """Risk of its tools (None: from each tool's annotations, see `tools.tool_risk`)."""
    tool_risk: dict[str, Risk] = field(default_factory=dict)
    """Per-tool overrides, by the server's own tool name."""
    timeout_seconds: float | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    env: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> tuple[str, str, int]:
        """What identifies a connection to it: tenant, name, version."""
        return (self.tenant_id, self.name, self.version)

    @property
    def origin(self) -> str:
        """Its tools' `origin`, and its `Unavailable.source`: `mcp:<name>`."""
        return f"mcp:{self.name}"

    @property
    def pattern(self) -> str:
        """The names of all its tools: `mcp__<name>__*`."""
        return f"mcp__{self.name}__*"

    def public(self) -> dict[str, Any]:
        """The stored `config` column: what may be shown and audited (never secret values)."""
        shown: dict[str, Any] = {
            "risk": self.risk,
            "toolRisk": dict(sorted(self.tool_risk.items())),
            "timeoutSeconds": self.timeout_seconds,
        }
        if self.transport == "http":
            shown |= {"url": self.url, "headerNames": sorted(self.headers)}
        else:
            shown |= {
                "command": self.command,
                "args": list(self.args),
                "envNames": sorted(self.env),
            }
        return shown


def config_from_row(
    tenant_id: str,
    name: str,
    transport: str,
    version: int,
    agent_id: UUID | None,
    enabled: bool,
    shown: dict[str, Any],
    secrets: dict[str, dict[str, str]],
) -> ServerConfig:
    """A `ServerConfig` from a stored row's columns and its opened secrets."""
    risk = shown.get("risk")
    return ServerConfig(
        tenant_id=tenant_id,
        name=name,
        transport="stdio" if transport == "stdio" else "http",
        version=version,
        agent_id=agent_id,
        enabled=enabled,
        url=shown.get("url"),
        command=shown.get("command"),
        args=tuple(shown.get("args") or ()),
        risk=risk if risk in RISKS else None,
        tool_risk={k: v for k, v in (shown.get("toolRisk") or {}).items() if v in RISKS},
        timeout_seconds=shown.get("timeoutSeconds"),
        headers=dict(secrets.get("headers") or {}),
        env=dict(secrets.get("env") or {}),
    )
