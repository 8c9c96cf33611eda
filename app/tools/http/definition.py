"""What a tenant HTTP tool is: its definition, and the rules a definition must follow.

Names are lowercase identifiers (`^[a-z][a-z0-9_]{0,63}$`), unique per tenant, never a built-in
tool's name nor under `mcp__` (the MCP servers' namespace). Parameters are a Draft 2020-12 schema
of an object. Headers are sent as given, except the ones the transport or the signature own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal
from uuid import UUID

from jsonschema import Draft202012Validator, SchemaError
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
Risk = Literal["low", "medium", "high"]

NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
MIN_TIMEOUT_SECONDS = 1.0
MAX_TIMEOUT_SECONDS = 120.0
MAX_HEADERS = 20
MAX_HEADER_VALUE_CHARS = 4096
MAX_PARAMETERS_BYTES = 64_000
SHOWN_SUFFIX_MIN_CHARS = 12
"""Values shorter than this show no last 4 characters (too much of a short secret)."""
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "content-encoding",
        "transfer-encoding",
        "accept-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "expect",
    }
)
"""Headers the transport sets (besides every `x-agent-runtime-*` and `proxy-*` header)."""
_TOKEN = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$")
_NAME = re.compile(NAME_PATTERN)
_BASE = "urn:agent-runtime:http-tool-parameters"


@dataclass(frozen=True, slots=True)
class HttpToolDefinition:
    """What an admin writes (`PUT /http-tools/{name}`); `headers` None keeps the stored ones."""

    name: str
    description: str
    url: str
    method: Method = "POST"
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    timeout_seconds: float = 30.0
    risk: Risk = "medium"
    agent_id: UUID | None = None
    headers: dict[str, str] | None = field(default=None, repr=False)


def name_problem(name: str, taken: Collection[str]) -> str | None:
    """Why `name` cannot name a tenant HTTP tool (`taken`: the deployment's built-in tools)."""
    if not _NAME.match(name):
        return (
            f"{name!r} is not a tool name: lowercase letters, digits and _, starting with a letter"
        )
    if name.startswith("mcp__"):
        return f"{name!r} is in the MCP tools' namespace (mcp__*)"
    if name in taken:
        return f"{name!r} is the name of a built-in tool"
    return None


def parameters_problem(schema: dict[str, Any]) -> str | None:
    """Why `schema` cannot describe a tool's arguments (None: it can)."""
    if len(json.dumps(schema)) > MAX_PARAMETERS_BYTES:
        return f"is larger than {MAX_PARAMETERS_BYTES} bytes"
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        return f"is not a valid JSON schema (Draft 2020-12): {exc.message}" + (
            f" (at {where})" if where else ""
        )
    if schema.get("type") != "object":
        return 'must describe an object (`"type": "object"`): a tool takes named arguments'
    return _reference_problem(schema)


def _reference_problem(schema: dict[str, Any]) -> str | None:
    """Why a `$ref` of `schema` would fail when arguments are validated: only references into
    the schema itself (`#...`) that resolve are accepted, and no `$id` may move the base."""
    resolver = Registry().with_resource(_BASE, DRAFT202012.create_resource(schema))
    lookup = resolver.resolver(base_uri=_BASE)
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            if key == "$id" and isinstance(value, str) and node is not schema:
                return "may not use `$id` inside the schema"
            if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                if not value.startswith("#"):
                    return f"{key} {value!r}: only references within the schema (#...) are allowed"
                try:
                    lookup.lookup(value)
                except Unresolvable:
                    return f"{key} {value!r} does not resolve within the schema"
            stack.append(value)
    return None


def header_problem(name: str, value: str) -> str | None:
    """Why header `name: value` cannot be configured (None: it can)."""
    lowered = name.lower()
    if not _TOKEN.match(name):
        return f"{name!r} is not a header name"
    if lowered in RESERVED_HEADERS or lowered.startswith(("x-agent-runtime-", "proxy-")):
        return f"{name!r} is set by the runtime, not configurable"
    if len(value) > MAX_HEADER_VALUE_CHARS:
        return f"the value of {name!r} is longer than {MAX_HEADER_VALUE_CHARS} characters"
    if any(ord(c) < 0x20 or ord(c) == 0x7F or ord(c) > 0xFF for c in value if c != "\t"):
        return f"the value of {name!r} has control or non-Latin-1 characters"
    return None


def shown_suffix(value: str) -> str | None:
    """What may be shown of a header value: its last 4 characters when it is long enough."""
    return value[-4:] if len(value) >= SHOWN_SUFFIX_MIN_CHARS else None
