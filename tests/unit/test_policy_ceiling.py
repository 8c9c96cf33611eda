"""A sub-agent's policy under its ancestors' (`EffectivePolicy.ceilings`): allowed only if every
policy allows, approvals of any apply, the smallest cap wins."""

from __future__ import annotations

from app.tools.approval_rules import ApprovalRules
from app.tools.policy import EffectivePolicy, PolicyLayer
from tests.unit.test_policy import READ, SESSIONS, SHELL, WRITE

CODING = EffectivePolicy(agent=PolicyLayer("agent", profile="coding"))
MINIMAL = EffectivePolicy(agent=PolicyLayer("agent", profile="minimal"))


def test_a_tool_needs_every_ancestors_allowance() -> None:
    child = EffectivePolicy(agent=PolicyLayer("agent", profile="coding"), ceilings=(MINIMAL,))
    assert [t.name for t in child.allowed([READ, WRITE, SHELL, SESSIONS])] == ["read_file"]
    verdict = child.evaluate(WRITE)
    assert (verdict.allowed, verdict.kind) == (False, "ceiling")
    assert verdict.reason.startswith(
        "not allowed to the run that spawned this sub-agent (not in the agent profile 'minimal'"
    )
    # the child's own refusal is reported as its own
    assert child.evaluate(SESSIONS).kind == "not_allowed"
    # any ancestor up the chain counts
    grandchild = EffectivePolicy(
        agent=PolicyLayer("agent", profile="full"), ceilings=(CODING, MINIMAL)
    )
    assert grandchild.evaluate(SHELL).kind == "ceiling"
    assert grandchild.evaluate(READ).allowed
    assert not EffectivePolicy(ceilings=()).evaluate(SESSIONS).allowed  # coding by default


def test_ancestors_approvals_and_caps_apply() -> None:
    strict = EffectivePolicy(
        tenant=PolicyLayer(
            "tenant",
            profile="full",
            require_approval=ApprovalRules.parse({"tools": ["write_file"]}),
            max_calls_per_run=2,
        )
    )
    child = EffectivePolicy(
        agent=PolicyLayer("agent", profile="coding", max_calls_per_run=5, max_calls_per_turn=4),
        ceilings=(strict,),
    )
    assert (
        child.approval_reason(WRITE, {})
        == "tool matches 'write_file' (tenant policy), of the spawning run"
    )
    assert child.approval_reason(READ, {}) is None
    rule = child.approval_rule(WRITE)
    assert rule is not None and rule.endswith(", of the spawning run")
    assert child.max_calls_per_run is not None and child.max_calls_per_run.limit == 2
    assert child.max_calls_per_turn is not None and child.max_calls_per_turn.limit == 4
    assert child.cap_refusal(1, 3) is not None and child.cap_refusal(1, 2) is None
    assert CODING.approval_reason(WRITE, {}) is None and CODING.max_calls_per_run is None
