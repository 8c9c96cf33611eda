"""The pure tool policy: profiles, allow/deny patterns, precedence, owner-only, caps."""

from __future__ import annotations

from typing import Any

import pytest

from app.memory.tools import memory_tools
from app.tools.base import Tool, ToolContext
from app.tools.patterns import InvalidPatternError, matches, validate_pattern, validate_patterns
from app.tools.policy import PROFILES, EffectivePolicy, PolicyLayer


def make(name: str, group: str = "fs", risk: str = "low", owner_only: bool = False) -> Tool:
    """A tool with these attributes (never run)."""

    class T(Tool):
        description = "test tool"
        parameters: dict[str, Any] = {"type": "object"}

        async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
            raise AssertionError("not run")

    tool = T()
    tool.name = name
    tool.group = group  # type: ignore[assignment]
    tool.risk = risk  # type: ignore[assignment]
    tool.owner_only = owner_only
    return tool


READ = make("read_file")
WRITE = make("write_file", risk="medium")
SHELL = make("run_shell", "runtime", "high")
FETCH = make("web_fetch", "web", "medium")
SEARCH = make("web_search", "web", "medium")
MEMORY = make("memory_store", "memory")
SESSIONS = make("sessions_list", "sessions")
ADMIN = make("admin_reset", "runtime", "high", owner_only=True)
ALL = [READ, WRITE, SHELL, FETCH, SEARCH, MEMORY, SESSIONS, ADMIN]


def tenant(**kw: Any) -> PolicyLayer:
    return PolicyLayer(scope="tenant", **kw)


def agent(**kw: Any) -> PolicyLayer:
    return PolicyLayer(scope="agent", **kw)


def allowed(policy: EffectivePolicy) -> set[str]:
    return {t.name for t in policy.allowed(ALL)}


# ---------------------------------------------------------------------------- patterns


@pytest.mark.parametrize(
    ("pattern", "tool", "hit"),
    [
        ("read_file", READ, True),
        ("read_file", WRITE, False),
        ("*_file", WRITE, True),
        ("*", SHELL, True),
        ("run_?????", SHELL, True),
        ("web_[fs]*", SEARCH, True),
        ("group:web", FETCH, True),
        ("group:web", MEMORY, False),
        ("group:*", MEMORY, True),
        ("group:mem*", MEMORY, True),
        ("Read_File", READ, False),  # case-sensitive
        ("group:fs", SHELL, False),
    ],
)
def test_patterns(pattern: str, tool: Tool, hit: bool) -> None:
    assert matches(pattern, tool) is hit


@pytest.mark.parametrize(
    ("pattern", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("group:fss", "unknown tool group 'fss'"),
        ("rm -rf", "invalid tool pattern"),
        ("a/b", "invalid tool pattern"),
        ("x" * 201, "at most 200"),
    ],
)
def test_invalid_patterns(pattern: str, fragment: str) -> None:
    with pytest.raises(InvalidPatternError, match=fragment):
        validate_pattern(pattern)


def test_patterns_are_stripped_and_deduplicated() -> None:
    assert validate_patterns([" a ", "a", "group:fs", "group:f*"]) == ["a", "group:fs", "group:f*"]


# ---------------------------------------------------------------------------- profiles


def test_default_profile_is_coding() -> None:
    policy = EffectivePolicy()
    assert policy.profile == ("coding", "default")
    assert allowed(policy) == {"read_file", "write_file", "run_shell", "web_fetch", "memory_store"}
    assert policy.evaluate(MEMORY).reason == (
        "allowed by the default profile 'coding' (group:memory)"
    )
    verdict = policy.evaluate(SHELL)
    assert verdict.allowed and verdict.reason == (
        "allowed by the default profile 'coding' (group:runtime)"
    )
    assert policy.evaluate(SEARCH).reason == (
        "not in the default profile 'coding' and matched by no allow pattern"
    )


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        ("minimal", {"read_file", "sessions_list"}),
        # coding remembers across sessions (memory) but has no web_search or sessions tools
        ("coding", {"read_file", "write_file", "run_shell", "web_fetch", "memory_store"}),
        ("messaging", {"sessions_list", "memory_store", "web_fetch", "web_search"}),
        ("full", {t.name for t in ALL} - {"admin_reset"}),  # owner-only still needs the owner
    ],
)
def test_profiles(profile: str, expected: set[str]) -> None:
    assert profile in PROFILES
    assert allowed(EffectivePolicy(tenant=tenant(profile=profile))) == expected


def test_default_agent_has_every_memory_tool_and_minimal_none() -> None:
    """Agents remember across sessions by default (issue 5); `minimal` stays least privilege."""
    memory = {t.name for t in memory_tools()}
    assert memory == {"memory_store", "memory_search", "memory_get", "memory_forget"}
    assert {t.name for t in EffectivePolicy().allowed(memory_tools())} == memory
    messaging = EffectivePolicy(tenant=tenant(profile="messaging"))
    assert {t.name for t in messaging.allowed(memory_tools())} == memory
    assert EffectivePolicy(tenant=tenant(profile="minimal")).allowed(memory_tools()) == []
    send = make("sessions_send", "sessions", "medium")
    assert not EffectivePolicy(tenant=tenant(profile="minimal")).evaluate(send).allowed
    assert EffectivePolicy(tenant=tenant(profile="messaging")).evaluate(send).allowed


def test_agent_profile_replaces_tenant_profile_and_null_inherits() -> None:
    both = EffectivePolicy(tenant=tenant(profile="minimal"), agent=agent(profile="messaging"))
    assert both.profile == ("messaging", "agent")
    assert "memory_store" in allowed(both) and "read_file" not in allowed(both)
    inherit = EffectivePolicy(tenant=tenant(profile="minimal"), agent=agent(profile=None))
    assert inherit.profile == ("minimal", "tenant")
    assert allowed(inherit) == {"read_file", "sessions_list"}


# ---------------------------------------------------------------------------- allow / deny


def test_allow_adds_to_the_profile_from_either_layer() -> None:
    policy = EffectivePolicy(
        tenant=tenant(profile="minimal", allow=("web_*",)),
        agent=agent(allow=("group:memory",)),
    )
    assert allowed(policy) == {
        "read_file",
        "sessions_list",
        "web_fetch",
        "web_search",
        "memory_store",
    }
    assert policy.evaluate(SEARCH).reason == "allowed by the tenant allow pattern 'web_*'"
    assert policy.evaluate(MEMORY).reason == "allowed by the agent allow pattern 'group:memory'"
    assert policy.evaluate(READ).reason == "allowed by the tenant profile 'minimal' (read_file)"


def test_deny_wins_over_profile_and_allow() -> None:
    policy = EffectivePolicy(tenant=tenant(profile="full", allow=("run_shell",), deny=("run_*",)))
    verdict = policy.evaluate(SHELL)
    assert not verdict.allowed and verdict.kind == "deny"
    assert verdict.reason == "denied by the tenant deny pattern 'run_*'"


def test_agent_cannot_undo_a_tenant_deny() -> None:
    policy = EffectivePolicy(
        tenant=tenant(profile="coding", deny=("group:runtime",)),
        agent=agent(profile="full", allow=("run_shell", "*")),
    )
    assert "run_shell" not in allowed(policy)
    assert policy.evaluate(SHELL).reason == "denied by the tenant deny pattern 'group:runtime'"
    assert "web_search" in allowed(policy)  # the agent's profile widens everything else


def test_agent_deny_narrows_the_tenant() -> None:
    policy = EffectivePolicy(tenant=tenant(profile="full"), agent=agent(deny=("write_file",)))
    assert policy.profile == ("full", "tenant")
    assert "write_file" not in allowed(policy) and "run_shell" in allowed(policy)
    assert policy.evaluate(WRITE).reason == "denied by the agent deny pattern 'write_file'"


def test_deny_star_denies_everything() -> None:
    policy = EffectivePolicy(tenant=tenant(profile="full"), agent=agent(deny=("*",)))
    assert allowed(policy) == set()


# ---------------------------------------------------------------------------- owner-only


def test_owner_only_tools_need_the_agents_owner() -> None:
    full = tenant(profile="full")
    stranger = EffectivePolicy(tenant=full, is_owner=False)
    owner = EffectivePolicy(tenant=full, is_owner=True)
    assert "admin_reset" not in allowed(stranger)
    assert stranger.evaluate(ADMIN).reason == "owner-only tool: only the agent's owner may use it"
    assert "admin_reset" in allowed(owner)
    # An explicit allow does not lift owner-only; a deny still beats the owner.
    assert not EffectivePolicy(tenant=tenant(allow=("admin_reset",))).evaluate(ADMIN).allowed
    denied = EffectivePolicy(tenant=tenant(profile="full", deny=("admin_*",)), is_owner=True)
    assert denied.evaluate(ADMIN).kind == "deny"


# ---------------------------------------------------------------------------- caps


def test_no_caps_by_default() -> None:
    assert EffectivePolicy().cap_refusal(1000, 100_000) is None


def test_caps_take_the_smaller_value_of_the_layers() -> None:
    policy = EffectivePolicy(
        tenant=tenant(max_calls_per_turn=5, max_calls_per_run=10),
        agent=agent(max_calls_per_turn=2, max_calls_per_run=50),
    )
    assert policy.max_calls_per_turn is not None and policy.max_calls_per_turn.limit == 2
    assert policy.max_calls_per_turn.scope == "agent"
    assert policy.max_calls_per_run is not None and policy.max_calls_per_run.limit == 10
    assert policy.cap_refusal(2, 10) is None
    turn = policy.cap_refusal(3, 3)
    assert turn is not None and "at most 2 tool calls per model turn (agent policy)" in turn
    assert "call 3 of the turn" in turn
    run = policy.cap_refusal(1, 11)
    assert run is not None and "at most 10 tool calls per run (tenant policy)" in run


def test_cap_of_one_layer_applies_alone() -> None:
    policy = EffectivePolicy(agent=agent(max_calls_per_run=1))
    assert policy.cap_refusal(1, 1) is None
    assert policy.cap_refusal(1, 2) is not None


# ---------------------------------------------------------------------------- session scope


@pytest.mark.parametrize(
    ("tenant_scope", "agent_scope", "effective"),
    [
        (None, None, "user"),  # no layer opens it: the run's user's sessions
        ("user", None, "user"),
        ("tenant", None, "tenant"),
        ("tenant", "user", "user"),  # an agent may narrow it
        (None, "tenant", "user"),  # but not widen it (the API refuses to store that, too)
        ("user", "tenant", "user"),
    ],
)
def test_session_scope_is_opened_by_the_tenant_and_narrowed_by_the_agent(
    tenant_scope: Any, agent_scope: Any, effective: str
) -> None:
    policy = EffectivePolicy(
        tenant=tenant(session_scope=tenant_scope), agent=agent(session_scope=agent_scope)
    )
    assert policy.session_scope == effective
    assert EffectivePolicy().session_scope == "user"
    assert EffectivePolicy(tenant=tenant(session_scope="tenant")).session_scope == "tenant"
