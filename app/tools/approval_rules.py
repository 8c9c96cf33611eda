"""When a tool call needs a human's approval: the `require_approval` rules of a policy (pure).

Stored as `agent_tool_policies.require_approval` (JSONB, camelCase), e.g.::

    {"risk": ["high"],
     "tools": ["delete_file", "group:web"],
     "args": [{"tool": "run_shell", "arg": "command",
               "allowPrefixes": ["ls", "git status"], "allowRegex": ["^cat [a-z./]+$"]}]}

A call needs approval when ANY rule triggers:

* `risk`: the tool's risk level is listed;
* `tools`: the tool matches one of the patterns (see `patterns.py`);
* `args`: the tool matches the rule's `tool` pattern and its argument `arg` is not on the rule's
  allowlist. A value is allowlisted when it fully matches one of `allowRegex` (RE2 syntax, matched in linear
  time by `linear_regex.py`), or when it equals
  a prefix of `allowPrefixes` or starts with it followed by a space — and, for prefixes only,
  contains no shell control characters (``; & | ` $ < > ( ) \\`` or a line break), so that
  `ls; rm -rf ~` does not pass as `ls`. A missing or non-string argument, or one longer than
  4096 characters, is never allowlisted.

When several rules trigger, the call's reason is the most specific one: an argument rule, else a
tool pattern, else the risk level. The reason decides what a `trustSeconds` grant covers
(`approvals.py`): the reason of an argument rule, "`ARG` is not on the allowlist", names the
gated argument (`gated_argument`), so a grant given for one value never covers another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel

from app.tools.base import Tool
from app.tools.linear_regex import UnsafePatternError, check_pattern, full_match_any
from app.tools.patterns import Risk, first_match, matches, validate_pattern, validate_patterns

MAX_ALLOWLIST = 100
MAX_CHECKED_CHARS = 4096
_SHELL_CONTROL = re.compile(r"[;&|`$<>()\\\n\r]")
ARG_REASON_SUFFIX: Final = "` is not on the allowlist"
"""The reason of an argument rule is "`ARG`" followed by this (see `gated_argument`)."""
MAX_DESCRIBED = 10
"""Allowlist entries shown per list by `ArgRule.describe` (the rest are counted)."""

STORED: Final = "stored"
"""Validation context key: the rules come from the database, not from a request."""

TriggerKind = Literal["args", "tool", "risk"]
TRIGGER_ORDER: Final[dict[str, int]] = {"args": 0, "tool": 1, "risk": 2}
"""Most specific first: the order in which a call's reason is chosen among triggered rules."""


ApproverRole = Literal["admin", "owner"]
"""Who may decide an approval a rule requires: `admin` (an owner or admin) or `owner` only."""
_ROLE_RANK: Final[dict[str | None, int]] = {None: 0, "admin": 1, "owner": 2}


@dataclass(frozen=True, slots=True)
class Approver:
    """Who may decide the approvals of a call: a role (None: anyone who sees the approval) and
    whether the run's own user may."""

    role: ApproverRole | None = None
    allow_self: bool = True

    def merge(self, other: Approver) -> Approver:
        """The stricter of both (the higher role; self-approval only if both allow it)."""
        role = self.role if _ROLE_RANK[self.role] >= _ROLE_RANK[other.role] else other.role
        return Approver(role=role, allow_self=self.allow_self and other.allow_self)


@dataclass(frozen=True, slots=True)
class Trigger:
    """A rule that requires approval of a call: its kind and the reason in words."""

    kind: TriggerKind
    reason: str


def gated_argument(reason: str) -> str | None:
    """The argument an approval reason gates (argument rules; None: a tool or risk rule).

    Works on a policy's reason with its layer suffix ("… (tenant policy)") too.
    """
    if not reason.startswith("`") or ARG_REASON_SUFFIX not in reason:
        return None
    return reason[1 : reason.rindex(ARG_REASON_SUFFIX)]


class _Rules(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class ArgRule(_Rules):
    """Calls of tools matching `tool` need approval unless argument `arg` is allowlisted."""

    tool: str = Field(description="Tool name or pattern, e.g. `run_shell`.")
    arg: str = Field(min_length=1, max_length=100, description="The argument checked.")
    allow_prefixes: list[str] = Field(
        default_factory=list, max_length=MAX_ALLOWLIST, description="Allowed command prefixes."
    )
    allow_regex: list[str] = Field(
        default_factory=list,
        max_length=MAX_ALLOWLIST,
        description="Allowed values: regexes in RE2 syntax (linear-time matching: no "
        "backreferences or lookaround) that must match the whole value.",
    )

    @field_validator("tool")
    @classmethod
    def _pattern(cls, value: str) -> str:
        return validate_pattern(value)

    @field_validator("allow_prefixes")
    @classmethod
    def _prefixes(cls, values: list[str]) -> list[str]:
        if any(not v.strip() or len(v) > MAX_CHECKED_CHARS for v in values):
            raise ValueError("prefixes must be non-blank and at most 4096 characters")
        return values

    @field_validator("allow_regex")
    @classmethod
    def _regexes(cls, values: list[str], info: ValidationInfo) -> list[str]:
        stored = isinstance(info.context, dict) and info.context.get(STORED)
        for value in values:
            try:
                check_pattern(value)
            except UnsafePatternError as exc:
                if not (stored and _valid_before_re2(value)):
                    raise ValueError(str(exc)) from None
                # saved when patterns were Python regexes: kept, and matches nothing
        return values

    @property
    def reason(self) -> str:
        """Why a call this rule gates needs approval (names the argument; `gated_argument`)."""
        return f"`{self.arg}{ARG_REASON_SUFFIX}"

    def describe(self) -> str:
        """The rule in words, independent of any call (for `GET /tools`)."""
        if not self.allow_prefixes and not self.allow_regex:
            return f"every call needs approval: the allowlist of `{self.arg}` is empty"
        parts = []
        if self.allow_prefixes:
            parts.append("prefixes " + _listing(self.allow_prefixes))
        if self.allow_regex:
            parts.append("regexes " + _listing(self.allow_regex))
        return f"needs approval unless `{self.arg}` matches the allowlist: " + "; ".join(parts)

    def allowlisted(self, value: object) -> bool:
        """Whether `value` passes the allowlist."""
        if not isinstance(value, str) or len(value) > MAX_CHECKED_CHARS:
            return False
        if full_match_any(tuple(self.allow_regex), value):
            return True
        stripped = value.strip()
        if _SHELL_CONTROL.search(stripped):
            return False
        return any(
            stripped == p.strip() or stripped.startswith(p if p.endswith(" ") else p + " ")
            for p in self.allow_prefixes
        )


class ApprovalRules(_Rules):
    """The `require_approval` rules of one policy layer."""

    risk: list[Risk] = Field(default_factory=list, description="Risk levels needing approval.")
    tools: list[str] = Field(default_factory=list, description="Tool patterns needing approval.")
    args: list[ArgRule] = Field(
        default_factory=list, max_length=MAX_ALLOWLIST, description="Argument allowlists."
    )
    approver_role: ApproverRole | None = Field(
        default=None,
        description="Who may decide the approvals these rules require: `admin` (a tenant owner "
        "or admin) or `owner` (an owner only). Unset: anyone who can see the approval (the "
        "run's user, the tenant's admins).",
    )
    allow_self_approval: bool = Field(
        default=True,
        description="`false`: the run's own user may not decide the approvals these rules "
        "require (someone else must, e.g. an admin).",
    )

    @property
    def approver(self) -> Approver:
        """Who may decide the approvals these rules require."""
        return Approver(role=self.approver_role, allow_self=self.allow_self_approval)

    @field_validator("tools")
    @classmethod
    def _patterns(cls, values: list[str]) -> list[str]:
        return validate_patterns(values)

    @classmethod
    def parse(cls, stored: dict[str, Any] | None) -> ApprovalRules:
        """The rules of a stored JSONB value (`{}`: none). Regexes stored before RE2 checked them
        are kept (and match nothing) rather than making the whole policy unreadable."""
        return cls.model_validate(stored or {}, context={STORED: True})

    def stored(self) -> dict[str, Any]:
        """The JSONB value to store (camelCase, empty lists left out)."""
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=True)

    def triggers(self, tool: Tool, args: dict[str, Any]) -> list[Trigger]:
        """The rules that require approval of a call of `tool` with `args`, most specific first:
        argument rules (in order), the first matching tool pattern, the risk level."""
        found = [
            Trigger("args", rule.reason)
            for rule in self.args
            if matches(rule.tool, tool) and not rule.allowlisted(args.get(rule.arg))
        ]
        if (pattern := first_match(tuple(self.tools), tool)) is not None:
            found.append(Trigger("tool", f"tool matches {pattern!r}"))
        if tool.risk in self.risk:
            found.append(Trigger("risk", f"{tool.risk}-risk tool"))
        return found

    def reason(self, tool: Tool, args: dict[str, Any]) -> str | None:
        """Why a call of `tool` with `args` needs approval: the most specific triggered rule."""
        found = self.triggers(tool, args)
        return found[0].reason if found else None

    def describe(self, tool: Tool) -> tuple[list[str], list[str]]:
        """The rules that may gate calls of `tool`, in words, whatever the arguments: those that
        always apply (tool pattern, risk) and the argument rules (which depend on the call)."""
        always = [t.reason for t in self.triggers(tool, {}) if t.kind != "args"]
        conditional = [rule.describe() for rule in self.args if matches(rule.tool, tool)]
        return always, conditional


def _valid_before_re2(pattern: str) -> bool:
    """Whether a stored pattern passed the check of its time (compiling as a Python regex, which
    is only ever compiled here, never matched)."""
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


def _listing(values: list[str]) -> str:
    shown = ", ".join(repr(v) for v in values[:MAX_DESCRIBED])
    more = len(values) - MAX_DESCRIBED
    return shown + (f" and {more} more" if more > 0 else "")
