"""Tenant-supplied patterns: RE2 matches in linear time, refuses what it cannot guarantee, and
stored patterns it refuses fail closed; tool patterns (fnmatch) stay fast on adversarial input."""

from __future__ import annotations

import time
from fnmatch import fnmatchcase

import pytest
from pydantic import ValidationError

from app.tools.approval_rules import ApprovalRules, ArgRule
from app.tools.base import Tool
from app.tools.linear_regex import (
    MAX_PATTERN_CHARS,
    UnsafePatternError,
    check_pattern,
    full_match_any,
)


class _Shell(Tool):
    name = "run_shell"
    description = "a shell"
    parameters: dict[str, object] = {"type": "object"}
    group = "runtime"
    risk = "high"

    async def run(self, ctx: object, args: dict[str, object]) -> object:
        raise NotImplementedError


CATASTROPHIC = ["(a|a)*b", "(a+)+b", "(a*)*b", "((a|aa)+)+b", "(.*a){20}b"]


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_catastrophic_patterns_match_in_linear_time(pattern: str) -> None:
    """Python's `re` takes exponential time on these (the issue's 26 characters: 7.9 s)."""
    started = time.perf_counter()
    for _ in range(10):
        assert not full_match_any((pattern,), "a" * 4096)
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a)\1", "invalid escape"),
        (r"(?=a)a", "invalid perl operator"),
        (r"(?<!a)b", "invalid perl operator"),
        ("(unclosed", "missing )"),
        ("a{1001}", "invalid repetition size"),
        ("x" * (MAX_PATTERN_CHARS + 1), "at most"),
        ("((a{100}){100}){100}", "invalid repetition size"),
        (r"\pL{900}", "pattern too large"),
    ],
)
def test_patterns_re2_cannot_guarantee_are_refused(pattern: str, reason: str) -> None:
    with pytest.raises(UnsafePatternError) as caught:
        check_pattern(pattern)
    assert reason in str(caught.value)


def test_full_match_semantics() -> None:
    assert full_match_any(("^cat [a-z./]+$",), "cat notes.txt")
    assert not full_match_any(("cat [a-z]+",), "cat notes; rm -rf ~")  # must match the whole value
    assert full_match_any(("ls", "git (status|log)"), "git log")
    assert full_match_any(("(?i)LS",), "ls")
    assert not full_match_any((), "ls")


def test_an_unsafe_pattern_in_a_request_is_a_validation_error() -> None:
    with pytest.raises(ValidationError) as caught:
        ArgRule.model_validate({"tool": "run_shell", "arg": "command", "allowRegex": [r"(a)\1"]})
    assert "RE2" in str(caught.value)


def test_stored_rules_with_a_pattern_re2_refuses_still_load_and_fail_closed() -> None:
    """A regex saved before RE2 checked patterns keeps the policy readable and allowlists nothing."""
    stored = {"args": [{"tool": "run_shell", "arg": "command", "allowRegex": [r"(ls)\1?", "pwd"]}]}
    rules = ApprovalRules.parse(stored)
    shell = _Shell()
    assert rules.reason(shell, {"command": "ls"}) == "`command` is not on the allowlist"
    assert rules.reason(shell, {"command": "pwd"}) is None
    assert rules.stored() == stored


def test_arg_rule_with_catastrophic_regex_decides_quickly() -> None:
    rule = ArgRule.model_validate(
        {"tool": "run_shell", "arg": "command", "allowRegex": CATASTROPHIC}
    )
    started = time.perf_counter()
    assert not rule.allowlisted("a" * 4096)
    assert time.perf_counter() - started < 1.0


def test_tool_patterns_are_fast_on_adversarial_input() -> None:
    """Tool patterns go through `fnmatch`, whose translation (3.11) uses atomic groups: no
    backtracking blow-up even with many wildcards against a long name."""
    started = time.perf_counter()
    for pattern in ("*a" * 60 + "*b", "*?" * 99 + "b", "[a]*" * 50 + "b"):
        assert not fnmatchcase("a" * 4000, pattern)
    assert time.perf_counter() - started < 1.0
