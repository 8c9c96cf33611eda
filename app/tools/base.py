"""The `Tool` interface, the context a tool runs in, and `ToolError` (a failure fed back).

A tool declares a JSON schema (Draft 2020-12) for its arguments; the registry validates the
model's arguments against it before `run` is called, so `run` may trust their shape. A tool
signals an expected failure (missing file, quota exceeded, bad path) by raising `ToolError` with a
message for the model; anything else it raises is reported as an internal tool error.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from app.auth.principal import Principal
from app.config import Settings
from app.db.engine import Database
from app.llm.base import ToolSpec


class ToolError(Exception):
    """An expected tool failure; `message` is shown to the model as the call's error."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may use: the database (as the run's tenant), the run and its session."""

    db: Database
    principal: Principal
    session_id: UUID
    run_id: UUID
    settings: Settings
    tool_call_id: str = ""
    """The call being executed (set by the registry for each call)."""


class AwaitingArrival(Exception):  # noqa: N818  (a control-flow signal, not an error)
    """The call waits for runs to end (`sessions_wait`, `sessions_send` with `waitForReply`): the
    worker parks the run `waiting` until one of `awaited` ends, a user's message is steered in, or
    `wake_at`; then the call is executed again and finds what arrived."""

    def __init__(self, awaited: list[UUID], wake_at: datetime) -> None:
        super().__init__(f"waiting for {len(awaited)} run(s) until {wake_at.isoformat()}")
        self.awaited = awaited
        self.wake_at = wake_at


class Tool(ABC):
    """A tool: name, description, argument schema, idempotency and an async `run`."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema (Draft 2020-12) of the arguments object."""
    idempotent: bool = False
    """Safe to run again when a worker died mid-call (its outcome is unknown)."""
    group: Literal["fs", "runtime", "web", "memory", "sessions", "mcp", "http"] = "fs"
    """Policy group (`group:NAME` in allow/deny lists)."""
    risk: Literal["low", "medium", "high"] = "low"
    """Risk level, which approval rules may key on."""
    owner_only: bool = False
    """Only the agent's owner may have it."""
    origin: str = "built-in"
    """Where it comes from: `built-in`, or a tenant's source (`mcp:<server>`, `http`)."""
    timeout_seconds: float | None = None
    """How long one call may take before it fails with a timeout (None: the tool's own limits)."""

    @abstractmethod
    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """Do the work; return a JSON-able result or raise `ToolError`."""

    def spec(self) -> ToolSpec:
        """How the tool is offered to the model."""
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)
