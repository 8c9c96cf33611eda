"""Regular expressions that tenants supply, matched in linear time by RE2 (never by Python's `re`).

A tenant's pattern runs inside the worker that serves every tenant. Python's backtracking engine
takes exponential time on patterns like `(a|a)*b`, so one tenant's approval rule could stall the
worker's event loop, and with it every other tenant's runs and the lease heartbeat. RE2 (Google's
engine, through the maintained `google-re2` binding) guarantees time linear in the input and
memory bounded by `MAX_PROGRAM_BYTES`; it has no backreferences or lookaround, so patterns that
need them are refused when a policy is saved (`check_pattern`), with the reason.

A stored pattern RE2 cannot compile (saved before this check existed) matches nothing: a rule's
allowlist fails closed, so the call needs approval rather than passing unchecked.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final, Protocol, cast

import re2  # type: ignore[import-untyped]

MAX_PATTERN_CHARS: Final = 500
MAX_PROGRAM_BYTES: Final = 1 << 20
"""RE2's memory budget for one compiled pattern (its DFA cache included)."""
MAX_PROGRAM_SIZE: Final = 10_000
"""Largest compiled program accepted (RE2's own measure; `a{1000}` is about 1,000)."""


class UnsafePatternError(ValueError):
    """A pattern that cannot be matched in guaranteed linear time (the message says why)."""


class _Compiled(Protocol):
    def fullmatch(self, text: str) -> object | None: ...

    @property
    def programsize(self) -> int: ...


def _options() -> object:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    options.max_mem = MAX_PROGRAM_BYTES
    return cast(object, options)


def _compile(pattern: str) -> _Compiled:
    """`pattern` compiled by RE2, or `UnsafePatternError`."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise UnsafePatternError(f"a regex may have at most {MAX_PATTERN_CHARS} characters")
    try:
        compiled = cast(_Compiled, re2.compile(pattern, _options()))
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid pattern"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise UnsafePatternError(
            f"invalid regex {pattern!r}: {reason} (patterns use RE2 syntax, which matches in "
            "linear time: no backreferences, lookahead or lookbehind)"
        ) from None
    if compiled.programsize > MAX_PROGRAM_SIZE:
        raise UnsafePatternError(
            f"regex {pattern!r} is too large once compiled ({compiled.programsize} > "
            f"{MAX_PROGRAM_SIZE}); simplify its counted repetitions"
        )
    return compiled


def check_pattern(pattern: str) -> str:
    """`pattern` if RE2 can match it in linear time, else `UnsafePatternError` saying why."""
    _compile(pattern)
    return pattern


@lru_cache(maxsize=1024)
def _allowlist(patterns: tuple[str, ...]) -> tuple[_Compiled, ...]:
    usable = []
    for pattern in patterns:
        try:
            usable.append(_compile(pattern))
        except UnsafePatternError:
            continue  # stored before the check: matches nothing (fails closed)
    return tuple(usable)


def full_match_any(patterns: tuple[str, ...], text: str) -> bool:
    """Whether `text` fully matches one of `patterns` (RE2; compiled once per pattern list)."""
    return any(rx.fullmatch(text) is not None for rx in _allowlist(patterns))
