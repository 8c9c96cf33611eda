"""The `Tool` interface, the context a tool runs in, and `ToolError` (a failure fed back).

A tool declares a JSON schema (Draft 2020-12) for its arguments; the registry validates the
model's arguments against it before `run` is called, so `run` may trust their shape. A tool
signals an expected failure (missing file, quota exceeded, bad path) by raising `ToolError` with a
message for the model; anything else it raises is reported as an internal tool error.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
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


class Tool(ABC):
    """A tool: name, description, argument schema, idempotency and an async `run`."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema (Draft 2020-12) of the arguments object."""
    idempotent: bool = False
    """Safe to run again when a worker died mid-call (its outcome is unknown)."""
    group: Literal["fs", "runtime", "web", "memory", "sessions"] = "fs"
    """Policy group (`group:NAME` in allow/deny lists)."""
    risk: Literal["low", "medium", "high"] = "low"
    """Risk level, which approval rules may key on."""
    owner_only: bool = False
    """Only the agent's owner may have it."""

    @abstractmethod
    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """Do the work; return a JSON-able result or raise `ToolError`."""

    def spec(self) -> ToolSpec:
        """How the tool is offered to the model."""
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)
