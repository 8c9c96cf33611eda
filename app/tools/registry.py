"""The tool registry: what the model is offered, and validated, failure-proof execution.

`execute` never raises for a tool's sake: an unknown tool, arguments that fail the tool's JSON
schema, a `ToolError` or an unexpected exception all become a failed `ToolResult` whose error the
model reads on its next turn. Only cancellation (`CancelledError`, a `BaseException`) and a lost
lease propagate, because they mean this worker must stop, not that the tool failed.

`default_tool_registry` holds every tool of the deployment (`catalog.py`); `PolicyToolRegistry`
is what one run gets: only the tools its policy allows (`policy.py`), so the model is never
offered anything else; `tools_for_run` builds it. The tool-execution phase checks the policy
again before each call (`app/runtime/tool_execution.py`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import structlog
from jsonschema import Draft202012Validator

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

log = structlog.get_logger(__name__)

MAX_VALIDATION_ERRORS = 5


class ToolRegistry:
    """Tools by name, each with its compiled argument validator."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._validators: dict[str, Draft202012Validator] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add `tool`; its schema must be a valid Draft 2020-12 schema and its name unused."""
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        Draft202012Validator.check_schema(tool.parameters)
        self._tools[tool.name] = tool
        self._validators[tool.name] = Draft202012Validator(tool.parameters)

    def adopt(self, other: ToolRegistry, name: str) -> None:
        """Register `other`'s tool `name` with its already compiled validator."""
        if name in self._tools:
            raise ValueError(f"tool {name!r} is already registered")
        self._tools[name] = other._tools[name]
        self._validators[name] = other._validators[name]

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
        errors = sorted(
            self._validators[name].iter_errors(args), key=lambda e: list(e.absolute_path)
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
            available = ", ".join(self.names()) or "none"
            return _failed(call, f"unknown tool {call.name!r} (available: {available})")
        if (problem := self.validation_error(call.name, call.args)) is not None:
            return _failed(call, problem)
        try:
            result = await tool.run(replace(ctx, tool_call_id=call.id), call.args)
            json.dumps(result)  # must be storable as JSONB and readable by the model
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
        for tool in policy.allowed(catalog.tools()):
            self.adopt(catalog, tool.name)


def default_tool_registry(settings: Settings | None = None) -> ToolRegistry:
    """Every tool of the deployment, unfiltered (`catalog.py`; default: the process settings)."""
    return ToolRegistry(tool_catalog(settings if settings is not None else get_settings()))


async def tools_for_run(db: Database, run: ClaimedRun, catalog: ToolRegistry) -> PolicyToolRegistry:
    """The tools `run` may use: `catalog` filtered by the policy of its agent and user (and, for a
    sub-agent's run, by the policies of the runs that spawned it: never more than they may)."""
    async with db.tenant(run.principal) as s:
        policy = await resolve_lineage_policy(
            s, run_id=run.id, agent_id=run.agent_id, user_id=run.user_id
        )
    return PolicyToolRegistry(catalog, policy)
