"""The tool registry: what the model is offered, and validated, failure-proof execution.

`execute` never raises for a tool's sake: an unknown tool, arguments that fail the tool's JSON
schema, a `ToolError` or an unexpected exception all become a failed `ToolResult` whose error the
model reads on its next turn. Only cancellation (`CancelledError`, a `BaseException`) and a lost
lease propagate, because they mean this worker must stop, not that the tool failed.

`default_tool_registry` holds every tool of the deployment (`catalog.py`); a run's catalog adds
the tools its tenant's sources bring (MCP servers, HTTP tools: `sources.py`, `run_catalog`);
`PolicyToolRegistry` is what one run gets: only the tools its policy allows (`policy.py`), so
the model is never offered anything else; `tools_for_run` builds it. The tool-execution phase checks the policy
again before each call (`app/runtime/tool_execution.py`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import structlog
from jsonschema import Draft202012Validator, SchemaError
from referencing.exceptions import Unresolvable

from app.config import Settings, get_settings
from app.core.errors import LeaseLostError
from app.core.transcript import ToolCall, ToolResult
from app.db.engine import Database
from app.llm.base import ToolSpec
from app.queue.manager import ClaimedRun
from app.tools.base import AwaitingArrival, Tool, ToolContext, ToolError
from app.tools.catalog import tool_catalog
from app.tools.policy import EffectivePolicy
from app.tools.policy_store import resolve_lineage_policy
from app.tools.sources import SourcedTools, ToolSources, Unavailable

log = structlog.get_logger(__name__)

MAX_VALIDATION_ERRORS = 5
_VALIDATOR_CACHE_SIZE = 2048
_validators: dict[str, Draft202012Validator] = {}


def compiled_validator(schema: dict[str, Any]) -> Draft202012Validator:
    """A checked, compiled validator for `schema`, shared by every registry of the process
    (a source's tools are registered anew for each run; their schemas rarely change).

    Raises `jsonschema.SchemaError` for a schema that is not valid Draft 2020-12."""
    key = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    validator = _validators.get(key)
    if validator is None:
        Draft202012Validator.check_schema(schema)
        validator = Draft202012Validator(schema)
        if len(_validators) >= _VALIDATOR_CACHE_SIZE:
            _validators.clear()
        _validators[key] = validator
    return validator


class ToolRegistry:
    """Tools by name, each with its compiled argument validator."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._validators: dict[str, Draft202012Validator] = {}
        self.unavailable: list[Unavailable] = []
        """Tools a source could not offer, and why (`sources.py`): explains their calls."""
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add `tool`; its schema must be a valid Draft 2020-12 schema and its name unused."""
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        validator = compiled_validator(tool.parameters)
        self._tools[tool.name] = tool
        self._validators[tool.name] = validator

    def adopt(self, other: ToolRegistry, name: str) -> None:
        """Register `other`'s tool `name` with its already compiled validator."""
        if name in self._tools:
            raise ValueError(f"tool {name!r} is already registered")
        self._tools[name] = other._tools[name]
        self._validators[name] = other._validators[name]

    def unavailable_reason(self, name: str) -> str | None:
        """Why a tool called `name` is missing, when a source could not offer it."""
        hit = next((u for u in self.unavailable if u.covers(name)), None)
        return None if hit is None else f"tool {name!r} is unavailable: {hit.reason}"

    def tools(self) -> list[Tool]:
        """The registered tools, sorted by name."""
        return [self._tools[n] for n in self.names()]

    def get(self, name: str) -> Tool | None:
        """The tool called `name`, if registered."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Registered tool names, sorted."""
        return sorted(self._tools)

    def specs(self) -> list[ToolSpec]:
        """The tools as offered to the model, sorted by name."""
        return [self._tools[n].spec() for n in self.names()]

    def is_idempotent(self, name: str) -> bool:
        """Whether the tool may be re-run after a worker died mid-call (unknown → False)."""
        tool = self._tools.get(name)
        return tool is not None and tool.idempotent

    def validation_error(self, name: str, args: dict[str, Any]) -> str | None:
        """Why `args` do not fit the tool's schema (None when they do)."""
        try:
            errors = sorted(
                self._validators[name].iter_errors(args), key=lambda e: list(e.absolute_path)
            )
        except Unresolvable as exc:  # a source's schema may `$ref` what is not there
            ref = getattr(exc, "ref", "?")
            return (
                f"{name} cannot be called: its parameters schema has an unresolvable $ref {ref!r}"
            )
        if not errors:
            return None
        parts = []
        for err in errors[:MAX_VALIDATION_ERRORS]:
            where = "/".join(str(p) for p in err.absolute_path)
            parts.append(f"{where}: {err.message}" if where else err.message)
        more = len(errors) - MAX_VALIDATION_ERRORS
        suffix = f" (and {more} more)" if more > 0 else ""
        return f"invalid arguments for {name}: " + "; ".join(parts) + suffix

    async def execute(self, ctx: ToolContext, call: ToolCall) -> ToolResult:
        """Validate and run `call`; every failure becomes a failed `ToolResult`."""
        tool = self._tools.get(call.name)
        if tool is None:
            if (why := self.unavailable_reason(call.name)) is not None:
                return _failed(call, why)
            available = ", ".join(self.names()) or "none"
            return _failed(call, f"unknown tool {call.name!r} (available: {available})")
        if (problem := self.validation_error(call.name, call.args)) is not None:
            return _failed(call, problem)
        try:
            async with asyncio.timeout(tool.timeout_seconds):
                result = await tool.run(replace(ctx, tool_call_id=call.id), call.args)
            json.dumps(result)  # must be storable as JSONB and readable by the model
        except TimeoutError:
            limit = tool.timeout_seconds
            return _failed(
                call, f"{call.name} timed out" + (f" after {limit:g} s" if limit else "")
            )
        except ToolError as exc:
            return _failed(call, exc.message)
        except (LeaseLostError, AwaitingArrival):
            raise
        except Exception as exc:
            log.exception("tool crashed", tool=call.name, tool_call_id=call.id)
            return _failed(call, f"internal tool error: {type(exc).__name__}")
        return ToolResult(tool_call_id=call.id, name=call.name, ok=True, result=result)


def _failed(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(tool_call_id=call.id, name=call.name, ok=False, error=message)


class PolicyToolRegistry(ToolRegistry):
    """The tools of `catalog` that `policy` allows; keeps both to explain refusals."""

    def __init__(self, catalog: ToolRegistry, policy: EffectivePolicy) -> None:
        super().__init__()
        self.catalog = catalog
        self.policy = policy
        self.unavailable = catalog.unavailable
        for tool in policy.allowed(catalog.tools()):
            self.adopt(catalog, tool.name)


def default_tool_registry(settings: Settings | None = None) -> ToolRegistry:
    """Every tool of the deployment, unfiltered (`catalog.py`; default: the process settings)."""
    return ToolRegistry(tool_catalog(settings if settings is not None else get_settings()))


def run_catalog(catalog: ToolRegistry, sourced: SourcedTools) -> ToolRegistry:
    """`catalog` plus the tools of the sources; a source tool whose name is taken or whose schema
    is invalid is left out and listed as unavailable (never an error)."""
    if not sourced.tools and not sourced.unavailable:
        return catalog
    merged = ToolRegistry()
    for name in catalog.names():
        merged.adopt(catalog, name)
    merged.unavailable = [*catalog.unavailable, *sourced.unavailable]
    for tool in sourced.tools:
        if merged.get(tool.name) is not None:
            reason = "its name is already taken by another tool"
        else:
            try:
                merged.register(tool)
                continue
            except SchemaError as exc:
                reason = f"its parameters are not a valid JSON schema ({exc.message})"
        merged.unavailable.append(Unavailable(tool.origin, tool.name, reason))
    return merged


async def tools_for_run(
    db: Database, run: ClaimedRun, catalog: ToolRegistry, sources: ToolSources | None = None
) -> PolicyToolRegistry:
    """The tools `run` may use: `catalog` and its tenant's sources' tools, filtered by the policy
    of its agent and user (and, for a sub-agent's run, by the policies of the runs that spawned
    it: never more than they may)."""
    sourced = SourcedTools()
    if sources is not None:
        sourced = await sources.tools_for(db, run.principal, run.agent_id)
    async with db.tenant(run.principal) as s:
        policy = await resolve_lineage_policy(
            s, run_id=run.id, agent_id=run.agent_id, user_id=run.user_id
        )
    return PolicyToolRegistry(run_catalog(catalog, sourced), policy)
