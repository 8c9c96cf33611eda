"""The checks a tool call passes before it may run (pure): known, allowed, under the caps, valid.

This is the defence in depth behind the filtered registry: the model is only offered the tools
its policy allows, but a call of anything else — a hallucinated name, a denied or owner-only
tool — is refused here too, with an error the model reads on its next turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.transcript import ToolCall
from app.tools.approval_rules import Approver
from app.tools.base import Tool
from app.tools.policy import EffectivePolicy
from app.tools.registry import PolicyToolRegistry, ToolRegistry


@dataclass(frozen=True, slots=True)
class CallGuard:
    """A run's policy, the tools it was offered and the whole catalog (to explain refusals)."""

    policy: EffectivePolicy
    offered: ToolRegistry
    catalog: ToolRegistry

    @classmethod
    def of(cls, tools: ToolRegistry, policy: EffectivePolicy) -> CallGuard:
        """The guard of a run handed `tools` (a `PolicyToolRegistry` knows its catalog)."""
        catalog = tools.catalog if isinstance(tools, PolicyToolRegistry) else tools
        return cls(policy=policy, offered=tools, catalog=catalog)

    def tool(self, call: ToolCall) -> Tool | None:
        """The offered tool a call names (None: not offered)."""
        return self.offered.get(call.name)

    def refusal(self, call: ToolCall, *, turn_call: int, run_call: int) -> str | None:
        """Why `call` may not run (None: it may, subject to approval).

        `turn_call`/`run_call`: its 1-based position among the calls of its model turn and of
        the run, for the caps.
        """
        tool = self.offered.get(call.name)
        known = tool or self.catalog.get(call.name)
        if known is None:
            if (why := self.catalog.unavailable_reason(call.name)) is not None:
                return why
            available = ", ".join(self.allowed_names()) or "none"
            return f"unknown tool {call.name!r} (available: {available})"
        verdict = self.policy.evaluate(known)
        if tool is None or not verdict.allowed:
            reason = verdict.reason if not verdict.allowed else "not offered to this run"
            return f"tool {call.name!r} is not allowed for this agent: {reason}"
        if (cap := self.policy.cap_refusal(turn_call, run_call)) is not None:
            return cap
        return self.offered.validation_error(call.name, call.args)

    def approval_reason(self, call: ToolCall) -> str | None:
        """Why an allowed, valid call needs a human's approval (None: it does not)."""
        tool = self.offered.get(call.name)
        return None if tool is None else self.policy.approval_reason(tool, call.args)

    def approver(self, call: ToolCall) -> Approver:
        """Who may decide `call`'s approval (see `EffectivePolicy.approver`)."""
        tool = self.offered.get(call.name)
        return Approver() if tool is None else self.policy.approver(tool, call.args)

    def allowed_names(self) -> list[str]:
        """The offered tools the policy allows."""
        return [t.name for t in self.policy.allowed(self.offered.tools())]
