"""Every tool this deployment has (before any policy): the one place tool sets are wired.

The sandbox (`run_python`, `run_shell`) and memory tools are being written alongside; they are
imported if their modules exist, so a tree without them still works.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import structlog

from app.config import Settings
from app.tools.base import Tool
from app.tools.sessions_tools import sessions_tools
from app.tools.sources import ToolSource, ToolSources
from app.tools.subagent_tools import subagent_tools
from app.tools.web.tools import web_tools
from app.tools.workspace_tools import workspace_tools

log = structlog.get_logger(__name__)

OPTIONAL_TOOL_SETS: tuple[tuple[str, str], ...] = (
    ("app.tools.sandbox.tools", "sandbox_tools"),
    ("app.memory.tools", "memory_tools"),
)
"""(module, factory) of tool sets that may be missing; each factory takes no arguments."""

TOOL_SOURCES: tuple[tuple[str, str], ...] = (
    ("app.tools.http.source", "http_tool_source"),
    ("app.tools.mcp.source", "mcp_tool_source"),
)
"""(module, factory) of the tenants' tool sources; each factory takes the `Settings`."""


def tool_catalog(settings: Settings) -> list[Tool]:
    """Workspace, web and sessions tools, plus the sandbox and memory tools when present."""
    tools: list[Tool] = [
        *workspace_tools(),
        *web_tools(settings),
        *sessions_tools(),
        *subagent_tools(),
    ]
    for module, factory in OPTIONAL_TOOL_SETS:
        tools.extend(_optional(module, factory))
    return tools


def default_tool_sources(settings: Settings) -> ToolSources:
    """The tenants' own tool sources this deployment serves (`sources.py`): the ones in
    `TOOL_SOURCES` whose modules exist, each built with the settings."""
    sources: list[ToolSource] = []
    for module, factory in TOOL_SOURCES:
        try:
            make: Callable[[Settings], ToolSource] = getattr(
                importlib.import_module(module), factory
            )
        except (ImportError, AttributeError):
            log.info("tool source not available", module=module)
            continue
        sources.append(make(settings))
    return ToolSources(sources)


def _optional(module: str, factory: str) -> list[Tool]:
    try:
        make: Callable[[], list[Tool]] = getattr(importlib.import_module(module), factory)
    except (ImportError, AttributeError):
        log.info("optional tool set not available", module=module)
        return []
    return list(make())
