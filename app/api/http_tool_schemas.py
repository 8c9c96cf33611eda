"""Request and response bodies of the tenant HTTP tools API (`/http-tools`)."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import ConfigDict, Field, field_validator

from app.api.schemas import ApiModel
from app.db.text import storable_text
from app.tools.http.definition import (
    MAX_HEADERS,
    MAX_TIMEOUT_SECONDS,
    MIN_TIMEOUT_SECONDS,
    Method,
    Risk,
    header_problem,
    parameters_problem,
)


class HttpToolBody(ApiModel):
    """A tool's definition; replaces a stored one of the same name (its signing secret stays)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "description": "Look up a customer's open orders by email.",
                    "parameters": {
                        "type": "object",
                        "properties": {"email": {"type": "string", "format": "email"}},
                        "required": ["email"],
                        "additionalProperties": False,
                    },
                    "url": "https://orders.example.com/agent/lookup",
                    "method": "POST",
                    "headers": {"Authorization": "Bearer …"},
                    "timeoutSeconds": 10,
                    "risk": "low",
                }
            ]
        }
    )

    description: str = Field(
        min_length=1, max_length=4000, description="What the tool does, for the model."
    )
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object"},
        description="JSON schema (Draft 2020-12) of the arguments object; the model's arguments "
        "are validated against it before a call.",
    )
    url: str = Field(
        min_length=1,
        max_length=2048,
        description="The endpoint (http or https). Reached under the deployment's address policy "
        "(private and internal addresses refused unless the operator allows them). Keep secrets "
        "out of it: it is shown in answers and audit events; put them in `headers`.",
    )
    method: Method = Field(
        default="POST", description="GET sends the arguments as the query string; others as JSON."
    )
    headers: dict[str, str] | None = Field(
        default=None,
        description="Headers sent with every call, e.g. `Authorization`. Stored encrypted and "
        "never returned (only names and last 4 characters). Omitted: a replaced tool keeps its "
        "stored headers; `{}` removes them.",
    )
    timeout_seconds: float = Field(
        default=30.0,
        ge=MIN_TIMEOUT_SECONDS,
        le=MAX_TIMEOUT_SECONDS,
        description="How long one call may take (connect, send, answer).",
    )
    risk: Risk = Field(default="medium", description="For approval rules keyed on risk.")
    agent_id: UUID | None = Field(
        default=None, description="Only this agent of the tenant gets the tool (null: every agent)."
    )

    @field_validator("description")
    @classmethod
    def _storable(cls, value: str) -> str:
        return storable_text(value)

    @field_validator("parameters")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        _storable_json(value)
        if (problem := parameters_problem(value)) is not None:
            raise ValueError(problem)
        return value

    @field_validator("headers")
    @classmethod
    def _valid_headers(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        if len(value) > MAX_HEADERS:
            raise ValueError(f"at most {MAX_HEADERS} headers")
        if len({name.lower() for name in value}) != len(value):
            raise ValueError("a header is given twice (names are case-insensitive)")
        # HTTP drops a value's surrounding whitespace; h11 refuses to send it
        trimmed = {name: header_value.strip(" \t") for name, header_value in value.items()}
        for name, header_value in trimmed.items():
            if (problem := header_problem(name, header_value)) is not None:
                raise ValueError(problem)
        return trimmed

    @field_validator("url")
    @classmethod
    def _trimmed(cls, value: str) -> str:
        return storable_text(value.strip())


def _storable_json(value: Any) -> None:
    """Refuse what a JSONB column cannot hold (NUL characters, lone surrogates, numbers too
    large for JSON, which Python reads as infinity)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            storable_text(node, blank_ok=True)
        elif isinstance(node, float) and not math.isfinite(node):
            raise ValueError("numbers must be finite")
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


class HeaderInfo(ApiModel):
    """A configured header: its name, and the last 4 characters of long values."""

    name: str
    last4: str | None = Field(description="null: the value is too short to show any of it.")


class HttpToolInfo(ApiModel):
    """A stored tool as the API shows it: never a header value nor the signing secret."""

    name: str
    agent_id: UUID | None
    description: str
    parameters: dict[str, Any]
    url: str
    method: str
    headers: list[HeaderInfo]
    timeout_seconds: float
    risk: str
    secret_rotated_at: datetime = Field(description="When its signing secret was made.")
    created_at: datetime
    updated_at: datetime


class HttpToolWithSecret(HttpToolInfo):
    """A tool just created, or whose secret was just rotated: the signing secret, shown once."""

    signing_secret: str = Field(
        description="The HMAC-SHA256 key of `X-Agent-Runtime-Signature` (docs/tools.md). Shown "
        "only in this answer: store it with the receiving endpoint."
    )


class HttpToolList(ApiModel):
    """The tenant's HTTP tools, by name."""

    tools: list[HttpToolInfo]
