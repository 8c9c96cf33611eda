"""Tool policy: which tools a run may use, why, and the limits on its calls (pure, no I/O).

A policy has up to two stored layers (`agent_tool_policies`): the tenant's row (`agent_id` NULL)
and the agent's row. A tool is decided by the first of these rules that applies:

1. **deny** — a tool matching a `deny` pattern of the tenant OR of the agent is denied. Deny
   always wins: no profile or allow pattern of either layer brings it back.
2. **owner-only** — a tool declared `owner_only` is denied unless the run's user is the agent's
   `owner_user_id`.
3. **profile** — the effective profile allows its tools. It is the agent row's profile; if the
   agent has no row or its profile is null, the tenant row's; with no tenant row, `coding`.
4. **allow** — a tool matching an `allow` pattern of the agent or of the tenant is allowed
   (allow lists of both layers add up).
5. Anything else is not allowed.

Which sessions the sessions tools (`sessions_list`, `sessions_history`, `sessions_send`) reach is
the policy's `session_scope`: the run's user's own sessions (`user`, the default) unless the
tenant's layer opens it to the whole tenant (`tenant`); an agent's layer may narrow it back to
`user` but never widen it.

The limits combine so that the tenant stays a ceiling: a call needs approval when the
`require_approval` rules of either layer say so (`approval_rules.py`), and each cap on tool
calls (`max_calls_per_turn`, `max_calls_per_run`) is the smaller of the values set. Calls are
counted as the model makes them: the n-th call of a model turn, the n-th call of the run (all
turns). A call past a cap is refused and the model is told why; it is not a run failure.

A spawned sub-agent's run also has **ceilings**: the policies of the runs above it (its parent's
agent and user, the grandparent's, …). A child can never do more than the runs that spawned it:
a tool is allowed only if its own policy and every ceiling allow it ("ceiling"), a call needs
approval if any of them says so, and each cap is the smallest of all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal

from app.tools.approval_rules import TRIGGER_ORDER, ApprovalRules, Approver
from app.tools.base import Tool
from app.tools.patterns import first_match

ProfileName = Literal["minimal", "coding", "messaging", "full"]
PROFILES: Final[dict[str, tuple[str, ...]]] = {
    # read-only, plus sub-agents (which can never exceed it: the ceiling); no sessions_send (it
    # starts runs in other people's sessions), like no memory_store
    "minimal": (
        "read_file",
        "list_files",
        "sessions_list",
        "sessions_history",
        "sessions_spawn",
        "sessions_wait",
    ),
    "coding": (
        "group:fs",
        "group:runtime",
        "group:memory",
        "web_fetch",
        "sessions_spawn",
        "sessions_wait",
    ),
    "messaging": ("group:sessions", "group:memory", "group:web"),
    "full": ("*",),
}
DEFAULT_PROFILE: Final = "coding"
"""The profile when neither layer sets one (the column default of `agent_tool_policies`)."""

Scope = Literal["default", "tenant", "agent"]
SessionScope = Literal["user", "tenant"]
DEFAULT_SESSION_SCOPE: Final = "user"
"""The sessions tools' reach when no layer opens it: the run's user's own sessions."""
RuleKind = Literal["deny", "owner_only", "profile", "allow", "not_allowed", "ceiling"]


@dataclass(frozen=True, slots=True)
class PolicyLayer:
    """One stored policy row: the tenant's (`scope="tenant"`) or an agent's."""

    scope: Literal["tenant", "agent"]
    profile: str | None = None
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    require_approval: ApprovalRules = field(default_factory=ApprovalRules)
    max_calls_per_turn: int | None = None
    max_calls_per_run: int | None = None
    session_scope: SessionScope | None = None
    """Which sessions the sessions tools reach; None: inherit (agent) or `user` (tenant)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a tool is allowed and the rule that decided it."""

    allowed: bool
    kind: RuleKind
    scope: Scope | None = None
    pattern: str | None = None
    profile: str | None = None
    detail: str | None = None
    """`ceiling`: why the spawning run's policy does not allow the tool."""

    @property
    def reason(self) -> str:
        """The deciding rule in words (shown by `GET /tools` and in refusals)."""
        if self.kind == "ceiling":
            return f"not allowed to the run that spawned this sub-agent ({self.detail})"
        if self.kind == "deny":
            return f"denied by the {self.scope} deny pattern {self.pattern!r}"
        if self.kind == "owner_only":
            return "owner-only tool: only the agent's owner may use it"
        if self.kind == "profile":
            return f"allowed by the {self.scope} profile {self.profile!r} ({self.pattern})"
        if self.kind == "allow":
            return f"allowed by the {self.scope} allow pattern {self.pattern!r}"
        return f"not in the {self.scope} profile {self.profile!r} and matched by no allow pattern"


@dataclass(frozen=True, slots=True)
class Cap:
    """A cap on tool calls and the layer that set it."""

    limit: int
    scope: Literal["tenant", "agent"]


@dataclass(frozen=True, slots=True)
class EffectivePolicy:
    """The tenant and agent layers of one run (either may be missing) and who runs it."""

    tenant: PolicyLayer | None = None
    agent: PolicyLayer | None = None
    is_owner: bool = False
    """The run's user is the agent's owner (owner-only tools)."""
    ceilings: tuple[EffectivePolicy, ...] = ()
    """A sub-agent's run: the policies of the runs that spawned it, nearest first (each without
    ceilings of its own: the list is flat)."""

    def layers(self) -> list[PolicyLayer]:
        """The stored layers, tenant first."""
        return [layer for layer in (self.tenant, self.agent) if layer is not None]

    def all_layers(self) -> list[PolicyLayer]:
        """The stored layers of this run's policy and of every ceiling (for the caps)."""
        return [*self.layers(), *(layer for c in self.ceilings for layer in c.all_layers())]

    @property
    def profile(self) -> tuple[str, Scope]:
        """The effective profile and where it comes from."""
        if self.agent is not None and self.agent.profile is not None:
            return self.agent.profile, "agent"
        if self.tenant is not None and self.tenant.profile is not None:
            return self.tenant.profile, "tenant"
        return DEFAULT_PROFILE, "default"

    @property
    def session_scope(self) -> SessionScope:
        """`tenant` only when the tenant's layer opens it and the agent's does not narrow it."""
        if self.tenant is None or self.tenant.session_scope != "tenant":
            return DEFAULT_SESSION_SCOPE
        if self.agent is not None and self.agent.session_scope == "user":
            return "user"
        return "tenant"

    def evaluate(self, tool: Tool) -> Verdict:
        """Whether `tool` is allowed, by the first rule that applies (see the module docstring),
        and by every ceiling."""
        verdict = self._evaluate_own(tool)
        if not verdict.allowed:
            return verdict
        for ceiling in self.ceilings:
            above = ceiling.evaluate(tool)
            if not above.allowed:
                return Verdict(False, "ceiling", detail=above.reason)
        return verdict

    def _evaluate_own(self, tool: Tool) -> Verdict:
        for layer in self.layers():
            if (pattern := first_match(layer.deny, tool)) is not None:
                return Verdict(False, "deny", layer.scope, pattern)
        if tool.owner_only and not self.is_owner:
            return Verdict(False, "owner_only")
        profile, source = self.profile
        if (pattern := first_match(PROFILES.get(profile, ()), tool)) is not None:
            return Verdict(True, "profile", source, pattern, profile)
        for layer in reversed(self.layers()):
            if (pattern := first_match(layer.allow, tool)) is not None:
                return Verdict(True, "allow", layer.scope, pattern)
        return Verdict(False, "not_allowed", source, profile=profile)

    def allowed(self, tools: Iterable[Tool]) -> list[Tool]:
        """The allowed ones of `tools`."""
        return [t for t in tools if self.evaluate(t).allowed]

    def approval_reason(self, tool: Tool, args: dict[str, object]) -> str | None:
        """Why a call needs approval (None: it does not), naming the layer whose rule triggered.

        Of the rules of both layers that trigger, the most specific decides (an argument rule,
        else a tool pattern, else the risk level; the tenant's first), because the reason is
        what a `trustSeconds` grant covers (`approvals.py`).
        """
        found = [
            (TRIGGER_ORDER[trigger.kind], n, i, f"{trigger.reason} ({layer.scope} policy)")
            for n, layer in enumerate(self.layers())
            for i, trigger in enumerate(layer.require_approval.triggers(tool, dict(args)))
        ]
        if found:
            return min(found)[3]
        for ceiling in self.ceilings:
            if (reason := ceiling.approval_reason(tool, args)) is not None:
                return f"{reason}, of the spawning run"
        return None

    def approver(self, tool: Tool, args: dict[str, object]) -> Approver:
        """Who may decide a call's approval: the strictest `approverRole`/`allowSelfApproval` of
        the layers whose rules require it (and of the ceilings')."""
        result = Approver()
        for layer in self.layers():
            if layer.require_approval.triggers(tool, dict(args)):
                result = result.merge(layer.require_approval.approver)
        for ceiling in self.ceilings:
            result = result.merge(ceiling.approver(tool, args))
        return result

    def approval_rule(self, tool: Tool) -> str | None:
        """When calls of `tool` need approval, in words, whatever their arguments (None: never).

        A tool-pattern or risk rule gates every call, which makes argument rules moot; else the
        argument rules are described with their allowlists.
        """
        always: list[str] = []
        conditional: list[str] = []
        for layer in self.layers():
            unconditional, by_args = layer.require_approval.describe(tool)
            always += [f"{why} ({layer.scope} policy)" for why in unconditional]
            conditional += [f"{why} ({layer.scope} policy)" for why in by_args]
        rules = ["; ".join(always or conditional)] if always or conditional else []
        for ceiling in self.ceilings:
            if (above := ceiling.approval_rule(tool)) is not None:
                rules.append(f"{above}, of the spawning run")
        return "; ".join(rules) or None

    @property
    def max_calls_per_turn(self) -> Cap | None:
        """The per-turn cap (the smallest of the layers' and the ceilings' values)."""
        return _smallest((layer.max_calls_per_turn, layer.scope) for layer in self.all_layers())

    @property
    def max_calls_per_run(self) -> Cap | None:
        """The per-run cap (the smallest of the layers' and the ceilings' values)."""
        return _smallest((layer.max_calls_per_run, layer.scope) for layer in self.all_layers())

    def cap_refusal(self, turn_call: int, run_call: int) -> str | None:
        """Why the `turn_call`-th call of its turn, `run_call`-th of the run, is refused (1-based)."""
        if (cap := self.max_calls_per_turn) is not None and turn_call > cap.limit:
            return (
                f"tool call limit reached: at most {cap.limit} tool calls per model turn "
                f"({cap.scope} policy); this was call {turn_call} of the turn and was not executed"
            )
        if (cap := self.max_calls_per_run) is not None and run_call > cap.limit:
            return (
                f"tool call limit reached: at most {cap.limit} tool calls per run "
                f"({cap.scope} policy); this was call {run_call} of the run and was not executed"
            )
        return None


def _smallest(values: Iterable[tuple[int | None, Literal["tenant", "agent"]]]) -> Cap | None:
    caps = [Cap(limit, scope) for limit, scope in values if limit is not None]
    return min(caps, key=lambda c: c.limit, default=None)
