"""Request and response bodies of the tenant MCP servers API (`/mcp-servers`)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal, Self
from uuid import UUID

from pydantic import ConfigDict, Field, field_validator, model_validator

from app.api.schemas import ApiModel
from app.db.text import storable_text
from app.tools.mcp.config import ENV_NAME_PATTERN, HEADER_NAME_PATTERN, RESERVED_HEADERS, Risk

MAX_SECRETS = 32
MAX_SECRET_CHARS = 8192
_HEADER_NAME = re.compile(HEADER_NAME_PATTERN)
_ENV_NAME = re.compile(ENV_NAME_PATTERN)


def _checked_values(values: dict[str, str], what: str) -> dict[str, str]:
    if len(values) > MAX_SECRETS:
        raise ValueError(f"at most {MAX_SECRETS} {what}s")
    for key, value in values.items():
        storable_text(value, blank_ok=True)
        if len(value) > MAX_SECRET_CHARS:
            raise ValueError(f"{what} {key!r}: at most {MAX_SECRET_CHARS} characters")
        if any(c in value for c in "\r\n\0"):
            raise ValueError(f"{what} {key!r}: no line breaks or NUL characters")
    return values


class McpServerBody(ApiModel):
    """An MCP server of the tenant (or of one agent); replaces a stored one of that name."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "transport": "http",
                    "url": "https://mcp.example.com/mcp",
                    "headers": {"Authorization": "Bearer …"},
                    "risk": "medium",
                    "toolRisk": {"delete_issue": "high"},
                },
                {
                    "transport": "stdio",
                    "agentId": "2b0e4c5a-0000-4000-8000-000000000000",
                    "command": "/opt/mcp/bin/notes-server",
                    "args": ["--read-only"],
                    "env": {"NOTES_TOKEN": "…"},
                },
            ]
        }
    )

    transport: Literal["http", "stdio"] = Field(
        description="`http` (streamable HTTP) or `stdio` (a command the workers start in their "
        "sandbox; only when the deployment enables MCP_STDIO_ENABLED)."
    )
    agent_id: UUID | None = Field(
        default=None, description="Only this agent's runs get it (unset: every agent's)."
    )
    url: str | None = Field(
        default=None,
        max_length=2048,
        description="http: the endpoint. Must pass the same address rules as web_fetch. Shown "
        "and audited: put credentials in `headers`, not in the URL.",
    )
    headers: dict[str, str] | None = Field(
        default=None,
        description="http: headers sent with every request (e.g. Authorization). Values are "
        "stored encrypted and never returned. Unset: keep the stored ones.",
    )
    command: str | None = Field(
        default=None, min_length=1, max_length=1024, description="stdio: the program to run."
    )
    args: list[str] = Field(
        default_factory=list, max_length=64, description="stdio: its arguments (shown)."
    )
    env: dict[str, str] | None = Field(
        default=None,
        description="stdio: its environment (it gets nothing else). Values are stored "
        "encrypted and never returned. Unset: keep the stored ones.",
    )
    risk: Risk | None = Field(
        default=None,
        description="Risk level of its tools for approval rules (unset: from each tool's "
        "annotations: read-only → low, destructive → high, else medium).",
    )
    tool_risk: dict[str, Risk] = Field(
        default_factory=dict, description="Risk per tool, by the server's own tool name."
    )
    timeout_seconds: float | None = Field(
        default=None, gt=0, le=3600, description="Limit of one call (unset: MCP_CALL_TIMEOUT)."
    )
    enabled: bool = Field(default=True, description="Disabled: its tools are not offered.")

    @field_validator("headers")
    @classmethod
    def _header_names(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        for name in value:
            if not _HEADER_NAME.match(name):
                raise ValueError(f"{name!r} is not a valid header name")
            if name.lower() in RESERVED_HEADERS:
                raise ValueError(f"{name!r} is set by the MCP transport itself")
        return _checked_values(value, "header")

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        for name in value:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
        return _checked_values(value, "env variable")

    @field_validator("args")
    @classmethod
    def _arg_sizes(cls, value: list[str]) -> list[str]:
        if any(len(a) > 4096 for a in value):
            raise ValueError("each argument: at most 4096 characters")
        return [storable_text(a, blank_ok=True) for a in value]

    @field_validator("url", "command")
    @classmethod
    def _storable(cls, value: str | None) -> str | None:
        return None if value is None else storable_text(value)

    @field_validator("tool_risk")
    @classmethod
    def _tool_names(cls, value: dict[str, Risk]) -> dict[str, Risk]:
        if len(value) > 1000:
            raise ValueError("at most 1000 tools")
        for name in value:
            if len(name) > 256:
                raise ValueError("tool names: at most 256 characters")
            storable_text(name)
        return value

    @model_validator(mode="after")
    def _fits_transport(self) -> Self:
        if self.transport == "http":
            if not self.url:
                raise ValueError("an http server needs `url`")
            if self.command is not None or self.args or self.env:
                raise ValueError("`command`, `args` and `env` are for stdio servers")
        else:
            if not self.command:
                raise ValueError("a stdio server needs `command`")
            if self.url is not None or self.headers:
                raise ValueError("`url` and `headers` are for http servers")
        return self


class McpServerStatus(ApiModel):
    """This API process's connection to the server (workers keep their own)."""

    connected: bool
    last_error: str | None = Field(description="Why the last connection or listing failed.")
    tool_count: int | None = Field(description="Tools in the last listing (None: never listed).")


class McpServerInfo(ApiModel):
    """A stored server as the API shows it: header and env names, never their values."""

    name: str
    agent_id: UUID | None
    transport: Literal["http", "stdio"]
    enabled: bool
    url: str | None = None
    header_names: list[str] = Field(default_factory=list)
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env_names: list[str] = Field(default_factory=list)
    risk: Risk | None
    tool_risk: dict[str, Risk]
    timeout_seconds: float | None
    tool_prefix: str = Field(description="Its tools' names start with this: `mcp__<name>__`.")
    version: int = Field(description="Raised by every change.")
    updated_by: str
    updated_at: datetime
    status: McpServerStatus | None = None


class McpServerList(ApiModel):
    """The tenant's MCP servers."""

    servers: list[McpServerInfo]
