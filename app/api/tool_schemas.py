"""Request and response bodies of the tools, policies and approvals routes (camelCase on the wire)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import ConfigDict, Field, field_validator, model_validator

from app.api.schemas import ApiModel
from app.tools.approval_rules import ApprovalRules
from app.tools.patterns import validate_patterns
from app.tools.policy import ProfileName, SessionScope

MAX_CALLS = 100_000

# ------------------------------------------------------------------ policies


class PolicyBody(ApiModel):
    """A policy layer to store (replaces the stored one entirely)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "profile": "coding",
                    "allow": ["group:memory"],
                    "deny": ["run_python"],
                    "requireApproval": {
                        "risk": ["high"],
                        "args": [{"tool": "run_shell", "arg": "command", "allowPrefixes": ["ls"]}],
                    },
                    "maxCallsPerTurn": 8,
                    "maxCallsPerRun": 50,
                    "sessionScope": "user",
                }
            ]
        }
    )

    profile: ProfileName | None = Field(
        default=None,
        description="minimal, coding, messaging or full. Omitted or null: the tenant policy "
        "gets `coding`; an agent policy inherits the tenant's profile.",
    )
    allow: list[str] = Field(
        default_factory=list, description="Tool names, fnmatch wildcards or `group:NAME`."
    )
    deny: list[str] = Field(default_factory=list, description="Like `allow`; deny always wins.")
    require_approval: ApprovalRules = Field(default_factory=ApprovalRules)
    max_calls_per_turn: int | None = Field(default=None, ge=1, le=MAX_CALLS)
    max_calls_per_run: int | None = Field(default=None, ge=1, le=MAX_CALLS)
    session_scope: SessionScope | None = Field(
        default=None,
        description="Which sessions the sessions tools (sessions_list, sessions_history, "
        "sessions_send) reach: `user`, the run's user's own sessions, or `tenant`, every session "
        "of the tenant. Omitted or null: `user` (tenant policy), the tenant's scope (agent "
        "policy). An agent policy may narrow it to `user`, never widen it to `tenant`.",
    )

    @field_validator("allow", "deny")
    @classmethod
    def _patterns(cls, values: list[str]) -> list[str]:
        return validate_patterns(values)


class PolicyInfo(ApiModel):
    """A stored policy layer (`configured: false`: none is stored; the values shown apply)."""

    scope: Literal["tenant", "agent"]
    agent_id: UUID | None
    configured: bool
    profile: str | None = Field(description="null (agent): the tenant's profile applies.")
    allow: list[str]
    deny: list[str]
    require_approval: ApprovalRules
    max_calls_per_turn: int | None
    max_calls_per_run: int | None
    session_scope: SessionScope | None = Field(
        description="Tenant: `user` (the default) or `tenant`. Agent: `user` (narrowed) or null "
        "(the tenant's scope applies)."
    )
    updated_at: datetime | None


# ------------------------------------------------------------------ tools


class RuleInfo(ApiModel):
    """The rule that decided whether a tool is allowed."""

    kind: Literal["deny", "owner_only", "profile", "allow", "not_allowed", "ceiling"]
    scope: Literal["default", "tenant", "agent"] | None
    pattern: str | None
    profile: str | None


class ToolInfo(ApiModel):
    """A tool and the policy's verdict on it."""

    name: str
    description: str
    group: str
    risk: str
    owner_only: bool
    source: str = Field(
        description="`built-in`, or the tenant's source: `mcp:<server>`, `http`.",
        examples=["built-in", "mcp:github"],
    )
    idempotent: bool
    parameters: dict[str, Any]
    allowed: bool
    reason: str = Field(examples=["allowed by the tenant profile 'coding' (group:fs)"])
    rule: RuleInfo
    approval: str | None = Field(
        description="When calls need approval, whatever their arguments: the tool-pattern or "
        "risk rule that always applies, else the argument rules with their allowlists; null: "
        "never.",
        examples=[
            "needs approval unless `command` matches the allowlist: prefixes 'ls', 'git status' "
            "(tenant policy)"
        ],
    )


class UnavailableInfo(ApiModel):
    """Tools a source could not offer now, and why (a server down, a secret gone, a bad schema)."""

    source: str = Field(examples=["mcp:github"])
    tools: str = Field(
        description="The tool name, or a pattern of the names it covers.",
        examples=["mcp__github__*"],
    )
    reason: str = Field(examples=["connection refused by https://mcp.example.com/mcp"])


class ToolsPage(ApiModel):
    """What an agent may use, and what not, with the reasons."""

    agent_id: UUID | None
    profile: str
    profile_source: Literal["default", "tenant", "agent"]
    owner: bool = Field(description="The caller owns the agent (owner-only tools).")
    max_calls_per_turn: int | None
    max_calls_per_run: int | None
    allowed: list[ToolInfo]
    denied: list[ToolInfo]
    unavailable: list[UnavailableInfo] = Field(
        default_factory=list,
        description="The tenant's tools (MCP servers, HTTP tools) that cannot be offered now.",
    )


class ToolExecutionInfo(ApiModel):
    """One tool call of a run (a `tool_executions` row)."""

    id: UUID = Field(
        description="The execution's id: the `executionId` of its `tool.started`, "
        "`tool.completed` and `tool.failed` events."
    )
    tool_call_id: str
    name: str
    args: dict[str, Any]
    status: Literal["started", "completed", "failed", "interrupted", "awaiting_approval"]
    result: Any = None
    error: dict[str, Any] | None
    started_at: datetime
    finished_at: datetime | None
    duration_ms: int | None
    attempt: int
    worker_id: str | None
    approval_id: UUID | None
    approval_status: str | None
    decided_by: str | None


class ToolExecutionPage(ApiModel):
    """A run's tool calls, in the order they started."""

    run_id: UUID
    executions: list[ToolExecutionInfo]


# ------------------------------------------------------------------ approvals

ApprovalStatus = Literal["pending", "approved", "denied", "expired"]


class ApprovalDecisionBody(ApiModel):
    """A decision on a pending approval."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"decision": "approve", "trustSeconds": 600, "reason": "looks fine"}]
        }
    )

    decision: Literal["approve", "deny"]
    trust_seconds: int = Field(
        default=0,
        ge=0,
        le=86_400,
        description="Approve: also approve, in this session for this long, later calls of the "
        "tool that need approval for the same reason (for an argument rule: with the same value "
        "of that argument).",
    )
    reason: str | None = Field(default=None, max_length=2000)

    @model_validator(mode="after")
    def _trust_needs_approve(self) -> ApprovalDecisionBody:
        if self.trust_seconds and self.decision != "approve":
            raise ValueError("trustSeconds only goes with decision approve")
        return self


class ApprovalInfo(ApiModel):
    """An approval gate of a tool call, and its outcome (the audit record)."""

    approval_id: UUID
    run_id: UUID
    tool_call_id: str
    tool: str
    args: dict[str, Any]
    risk: str
    reason: str
    status: ApprovalStatus
    decided_by: str | None
    decided_at: datetime | None
    decision_reason: str | None
    trust_seconds: int | None
    expires_at: datetime
    created_at: datetime
    approver_role: Literal["admin", "owner"] | None = Field(
        description="Who may decide it, from the rule that required it (kept when the policy "
        "changes later): `admin` (a tenant owner or admin), `owner`; null: anyone who can see "
        "it (the run's user, the tenant's owners and admins)."
    )
    allow_self_approval: bool = Field(
        description="false: the run's own user may not decide it (the rule's allowSelfApproval)."
    )
    can_decide: bool = Field(
        description="Whether the caller may decide it now (pending, and allowed by the rule)."
    )


class ApprovalPage(ApiModel):
    """Approvals, newest first."""

    approvals: list[ApprovalInfo]
