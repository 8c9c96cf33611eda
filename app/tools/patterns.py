"""Tool patterns of allow/deny lists and approval rules: names with wildcards, or `group:NAME`.

* `write_file` — exactly that tool;
* `memory_*`, `run_?????`, `*` — fnmatch-style wildcards on the tool name (case-sensitive);
* `group:fs`, `group:*` — tools whose group matches (groups: fs, runtime, web, memory, sessions,
  mcp (tools of MCP servers), http (the tenant's HTTP tools)).
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from typing import Final, Literal, get_args

from app.tools.base import Tool

Group = Literal["fs", "runtime", "web", "memory", "sessions", "mcp", "http"]
GROUPS: Final[tuple[str, ...]] = get_args(Group)
Risk = Literal["low", "medium", "high"]
RISKS: Final[tuple[str, ...]] = get_args(Risk)

GROUP_PREFIX = "group:"
MAX_PATTERN_CHARS = 200
MAX_PATTERNS = 100
_PATTERN_CHARS = re.compile(r"^[A-Za-z0-9_.*?\[\]!-]+$")
_WILDCARDS = frozenset("*?[")


class InvalidPatternError(ValueError):
    """A pattern the policy refuses (the message says why)."""


def matches(pattern: str, tool: Tool) -> bool:
    """Whether `pattern` matches `tool` (by group for `group:NAME`, else by name)."""
    if pattern.startswith(GROUP_PREFIX):
        return fnmatchcase(tool.group, pattern[len(GROUP_PREFIX) :])
    return fnmatchcase(tool.name, pattern)


def first_match(patterns: tuple[str, ...], tool: Tool) -> str | None:
    """The first of `patterns` that matches `tool`."""
    return next((p for p in patterns if matches(p, tool)), None)


def validate_pattern(pattern: str) -> str:
    """`pattern`, stripped, or `InvalidPatternError` (bad characters, unknown group, too long)."""
    value = pattern.strip()
    if not value:
        raise InvalidPatternError("a tool pattern may not be empty")
    if len(value) > MAX_PATTERN_CHARS:
        raise InvalidPatternError(f"a tool pattern may have at most {MAX_PATTERN_CHARS} characters")
    body = value[len(GROUP_PREFIX) :] if value.startswith(GROUP_PREFIX) else value
    if not _PATTERN_CHARS.match(body):
        raise InvalidPatternError(
            f"invalid tool pattern {value!r}: use a tool name, fnmatch wildcards (* ? [...]) "
            "or group:NAME"
        )
    if value.startswith(GROUP_PREFIX) and not (_WILDCARDS & set(body)) and body not in GROUPS:
        raise InvalidPatternError(f"unknown tool group {body!r} (groups: {', '.join(GROUPS)})")
    return value


def validate_patterns(patterns: list[str]) -> list[str]:
    """Each pattern validated, duplicates dropped (order kept)."""
    if len(patterns) > MAX_PATTERNS:
        raise InvalidPatternError(f"at most {MAX_PATTERNS} patterns")
    return list(dict.fromkeys(validate_pattern(p) for p in patterns))
