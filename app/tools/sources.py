"""Tool sources: tools a tenant brings (MCP servers, HTTP endpoints) beside the built-in catalog.

The catalog (`catalog.py`) is fixed per deployment; a source's tools depend on the tenant and
agent of a run and may change at any time (an admin attaches a server, a server's tool list
changes). Each run asks every source once for its tools (`ToolSources.tools_for`) and gets a
`RunCatalog`: the deployment's tools plus the sources', which the run's policy then filters
like any other (`registry.tools_for_run`).

A source that cannot answer — a server down, a secret that no longer decrypts — never fails the
run: what it could not offer is listed as `Unavailable` with the reason, which `GET /tools`
shows and a call of one of its tools gets as its error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Protocol
from uuid import UUID

import structlog

from app.auth.principal import Principal
from app.db.engine import Database
from app.tools.base import Tool

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Unavailable:
    """Tools a source could not offer, and why."""

    source: str
    """Which source, as shown to users: `mcp:<server>`, `http`."""
    pattern: str
    """The tool names it covers (a tool name or a pattern such as `mcp__github__*`)."""
    reason: str

    def covers(self, name: str) -> bool:
        """Whether a call of `name` would have been one of these tools."""
        return fnmatchcase(name, self.pattern)


@dataclass(frozen=True, slots=True)
class SourcedTools:
    """What a source offers one run: its tools, and what it could not offer."""

    tools: list[Tool] = field(default_factory=list)
    unavailable: list[Unavailable] = field(default_factory=list)


class ToolSource(Protocol):
    """Something that contributes tools per tenant and agent."""

    name: str
    """Short name for logs and `Unavailable.source` when the source itself fails."""
    names: str
    """A pattern its tools' names match (`mcp__*`), to explain calls when the source failed."""

    async def tools_for(
        self, db: Database, principal: Principal, agent_id: UUID | None
    ) -> SourcedTools:
        """The tools `principal`'s runs of agent `agent_id` get from this source."""
        ...

    async def aclose(self) -> None:
        """Release connections and processes (the worker or app is stopping)."""
        ...


class ToolSources:
    """Several sources asked together; one that raises is reported, never propagated."""

    def __init__(self, sources: Sequence[ToolSource] = ()) -> None:
        self.sources = list(sources)

    async def tools_for(
        self, db: Database, principal: Principal, agent_id: UUID | None
    ) -> SourcedTools:
        """Every source's tools for the run (asked concurrently)."""
        if not self.sources:
            return SourcedTools()
        answers = await asyncio.gather(
            *(s.tools_for(db, principal, agent_id) for s in self.sources), return_exceptions=True
        )
        merged = SourcedTools()
        for source, answer in zip(self.sources, answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, Exception):
                    raise answer
                log.warning("tool source failed", source=source.name, error=repr(answer))
                reason = f"{source.name} tools could not be loaded ({type(answer).__name__})"
                merged.unavailable.append(Unavailable(source.name, source.names, reason))
                continue
            merged.tools.extend(answer.tools)
            merged.unavailable.extend(answer.unavailable)
        return merged

    async def aclose(self) -> None:
        """Close every source (errors are logged, not raised)."""
        for source in self.sources:
            try:
                await source.aclose()
            except Exception as exc:
                log.warning("closing a tool source failed", source=source.name, error=repr(exc))
