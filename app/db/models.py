"""ORM mappings of the tables created by the migrations (the migrations are the source of truth).

`tests/integration/test_migrations.py` checks that these mappings and the migrated schema agree.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    Computed,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Integer,
    LargeBinary,
    SmallInteger,
    Text,
    func,
)
from sqlalchemy.dialects.postgresql import JSONB, TSVECTOR, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """Declarative base for all tables."""


def _pk_uuid() -> Mapped[uuid.UUID]:
    return mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=func.gen_random_uuid()
    )


def _now() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now())


class Agent(Base):
    """An agent configuration of a tenant (model, prompt, limits)."""

    __tablename__ = "agents"
    id: Mapped[uuid.UUID] = _pk_uuid()
    tenant_id: Mapped[str] = mapped_column(Text)
    name: Mapped[str] = mapped_column(Text)
    model: Mapped[str] = mapped_column(Text, server_default="offline")
    system_prompt: Mapped[str] = mapped_column(Text, server_default="")
    max_turns: Mapped[int] = mapped_column(Integer, server_default="8")
    is_default: Mapped[bool] = mapped_column(Boolean, server_default="false")
    owner_user_id: Mapped[str | None] = mapped_column(Text)
    settings: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class AgentSession(Base):
    """A chat session: one lane of the run queue, one transcript, one workspace."""

    __tablename__ = "agent_sessions"
    id: Mapped[uuid.UUID] = _pk_uuid()
    tenant_id: Mapped[str] = mapped_column(Text)
    session_key: Mapped[str] = mapped_column(Text)
    agent_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agents.id"))
    user_id: Mapped[str] = mapped_column(Text)
    title: Mapped[str | None] = mapped_column(Text)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB, server_default="{}")
    message_count: Mapped[int] = mapped_column(Integer, server_default="0")
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    last_run_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    token_count: Mapped[int] = mapped_column(BigInteger, server_default="0")
    """Sum of the transcript rows' `token_count` (estimated)."""
    context_tokens: Mapped[int | None] = mapped_column(Integer)
    """Input tokens of the session's latest model call, as the provider reported them."""
    compactions: Mapped[int] = mapped_column(Integer, server_default="0")
    memory_flushed_through_seq: Mapped[int] = mapped_column(Integer, server_default="0")
    """Transcript rows up to this seq were offered for a memory flush (each row once)."""
    visibility: Mapped[str] = mapped_column(Text, server_default="private")
    """`private` (its user and the tenant's admins) or `tenant` (every member may read it)."""


class Run(Base):
    """A queued/running/finished agent run (a row of the lane queue)."""

    __tablename__ = "agent_run_queue"
    id: Mapped[uuid.UUID] = _pk_uuid()
    tenant_id: Mapped[str] = mapped_column(Text)
    session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_sessions.id"))
    agent_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agents.id"))
    user_id: Mapped[str] = mapped_column(Text)
    queue_seq: Mapped[int] = mapped_column(BigInteger, Identity(always=True))
    status: Mapped[str] = mapped_column(Text, server_default="queued")
    input: Mapped[dict[str, Any]] = mapped_column(JSONB)
    created_at: Mapped[datetime] = _now()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    lease_owner: Mapped[str | None] = mapped_column(Text)
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    """Claims of the run (its fencing token): also counts resumptions after a hand-back or an
    approval, not only after a crash."""
    lease_expiries: Mapped[int] = mapped_column(Integer, server_default="0")
    """Claims that ended with the lease running out (the worker died or froze); a run whose
    lease expires for the MAX_RUN_ATTEMPTS-th time fails `worker_crashed`."""
    cancel_requested_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    input_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    output_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    usage_by_model: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    """`{model: {"inputTokens": n, "outputTokens": n}}`: the tokens above split by the model
    that used them (a run that fell back to another model has several)."""
    last_event_seq: Mapped[int] = mapped_column(Integer, server_default="0")
    state: Mapped[str | None] = mapped_column(Text)
    context_tokens: Mapped[int | None] = mapped_column(Integer)
    """Input tokens of the run's latest model call, as the provider reported them."""
    context_window: Mapped[int | None] = mapped_column(Integer)
    compactions: Mapped[int] = mapped_column(Integer, server_default="0")
    parent_run_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("agent_run_queue.id"))
    """The run that spawned this one (`sessions_spawn`)."""
    wake_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """A `waiting` run is requeued at this time even if nothing arrived."""
    not_before: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """Not claimable before this time (`ifBusy=collect`)."""
    deadline_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """The run fails with `run_timeout` at this time, queued or not (a child's timeout)."""
    trace_context: Mapped[dict[str, str] | None] = mapped_column(JSONB)
    """W3C `traceparent`/`tracestate` of the span that enqueued the run (tracing on), which the
    worker's run span continues (`app/observability/tracing.py`)."""


class SessionMessage(Base):
    """One transcript entry: a user/assistant message or a tool result (payload is JSONB)."""

    __tablename__ = "session_messages"
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(Text)
    session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_sessions.id"))
    run_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("agent_run_queue.id"))
    seq: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(Text)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB)
    token_count: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = _now()


class RunEvent(Base):
    """A stored stream event; `seq` is the SSE id, strictly increasing per run from 1."""

    __tablename__ = "run_events"
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(Text)
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_run_queue.id"))
    seq: Mapped[int] = mapped_column(Integer)
    type: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any]] = mapped_column(JSONB)
    created_at: Mapped[datetime] = _now()


class ToolExecution(Base):
    """One tool call of a run: arguments, outcome, timings, worker."""

    __tablename__ = "tool_executions"
    id: Mapped[uuid.UUID] = _pk_uuid()
    tenant_id: Mapped[str] = mapped_column(Text)
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_run_queue.id"))
    session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_sessions.id"))
    tool_call_id: Mapped[str] = mapped_column(Text)
    name: Mapped[str] = mapped_column(Text)
    args: Mapped[dict[str, Any]] = mapped_column(JSONB)
    status: Mapped[str] = mapped_column(Text)
    result: Mapped[Any | None] = mapped_column(JSONB)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    worker_id: Mapped[str | None] = mapped_column(Text)
    attempt: Mapped[int] = mapped_column(Integer, server_default="1")
    approval_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    started_at: Mapped[datetime] = _now()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AgentToolPolicy(Base):
    """Tool policy of a tenant (agent_id NULL) or of one agent."""

    __tablename__ = "agent_tool_policies"
    id: Mapped[uuid.UUID] = _pk_uuid()
    tenant_id: Mapped[str] = mapped_column(Text)
    agent_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("agents.id"))
    profile: Mapped[str | None] = mapped_column(Text, server_default="coding")
    """NULL (agent rows only): inherit the tenant's profile."""
    allow: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default="{}")
    deny: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default="{}")
    require_approval: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    max_calls_per_turn: Mapped[int | None] = mapped_column(Integer)
    max_calls_per_run: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
    session_scope: Mapped[str | None] = mapped_column(Text)
    """`user` or `tenant`: which sessions the sessions tools reach (NULL: inherit / user)."""


class MemoryEntry(Base):
    """A long-term memory: markdown content, embedding (any dimension) and full-text vector."""

    __tablename__ = "agent_memory_entries"
    id: Mapped[uuid.UUID] = _pk_uuid()
    tenant_id: Mapped[str] = mapped_column(Text)
    agent_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("agents.id"))
    session_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("agent_sessions.id"))
    content: Mapped[str] = mapped_column(Text)
    tags: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default="{}")
    importance: Mapped[float] = mapped_column(Float(precision=24), server_default="0.5")
    document_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    chunk_index: Mapped[int | None] = mapped_column(Integer)
    embedding: Mapped[Any | None] = mapped_column(Vector())
    embedder: Mapped[str | None] = mapped_column(Text)
    embedding_dim: Mapped[int | None] = mapped_column(Integer)
    content_tsv: Mapped[Any] = mapped_column(
        TSVECTOR, Computed("to_tsvector('english', content)", persisted=True)
    )
    access_count: Mapped[int] = mapped_column(Integer, server_default="0")
    last_accessed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class SubagentSpawn(Base):
    """A child run spawned by a parent run."""

    __tablename__ = "subagent_spawns"
    id: Mapped[uuid.UUID] = _pk_uuid()
    tenant_id: Mapped[str] = mapped_column(Text)
    parent_run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_run_queue.id"))
    parent_session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_sessions.id"))
    child_session_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("agent_sessions.id"))
    child_run_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("agent_run_queue.id"))
    agent_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("agents.id"))
    task: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text, server_default="pending")
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = _now()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    tool_call_id: Mapped[str | None] = mapped_column(Text)
    label: Mapped[str | None] = mapped_column(Text)
    child_session_key: Mapped[str | None] = mapped_column(Text)
    depth: Mapped[int] = mapped_column(Integer, server_default="1")
    timeout_seconds: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONB)


class AgentMessage(Base):
    """`sessions_send`: one agent's message into another session of the tenant."""

    __tablename__ = "agent_messages"
    id: Mapped[uuid.UUID] = _pk_uuid()
    tenant_id: Mapped[str] = mapped_column(Text)
    sender_run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_run_queue.id"))
    sender_session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_sessions.id"))
    tool_call_id: Mapped[str] = mapped_column(Text)
    target_session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_sessions.id"))
    target_run_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("agent_run_queue.id"))
    origin_run_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    message: Mapped[str] = mapped_column(Text)
    wait_for_reply: Mapped[bool] = mapped_column(Boolean, server_default="false")
    created_at: Mapped[datetime] = _now()


class RunInboxItem(Base):
    """A message for a run (a steering user message, a child's outcome, a reply), delivered once."""

    __tablename__ = "run_inbox"
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(Text)
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_run_queue.id"))
    kind: Mapped[str] = mapped_column(Text)
    source_run_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("agent_run_queue.id"))
    text: Mapped[str] = mapped_column(Text)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    created_at: Mapped[datetime] = _now()
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    delivery: Mapped[str | None] = mapped_column(Text)
    """`injected`, `tool`, `followup` or `dropped` once delivered."""
    delivered_to_run_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("agent_run_queue.id"))
    tool_call_id: Mapped[str | None] = mapped_column(Text)


class ContextSnapshot(Base):
    """A compaction summary covering a range of a session's transcript."""

    __tablename__ = "agent_context_snapshots"
    id: Mapped[uuid.UUID] = _pk_uuid()
    tenant_id: Mapped[str] = mapped_column(Text)
    session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_sessions.id"))
    run_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("agent_run_queue.id"))
    summary: Mapped[str] = mapped_column(Text)
    first_message_seq: Mapped[int] = mapped_column(Integer)
    last_message_seq: Mapped[int] = mapped_column(Integer)
    tokens_before: Mapped[int] = mapped_column(Integer)
    tokens_after: Mapped[int] = mapped_column(Integer)
    model: Mapped[str | None] = mapped_column(Text)
    summary_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    messages_covered: Mapped[int] = mapped_column(Integer, server_default="0")
    created_at: Mapped[datetime] = _now()


class WorkspaceFile(Base):
    """A file of a session's durable workspace."""

    __tablename__ = "workspace_files"
    tenant_id: Mapped[str] = mapped_column(Text)
    session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_sessions.id"), primary_key=True)
    path: Mapped[str] = mapped_column(Text, primary_key=True)
    content: Mapped[bytes] = mapped_column(LargeBinary)
    size: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class ToolApproval(Base):
    """An approval gate of one tool call: pending, then approved/denied/expired (the audit record)."""

    __tablename__ = "tool_approvals"
    id: Mapped[uuid.UUID] = _pk_uuid()
    tenant_id: Mapped[str] = mapped_column(Text)
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_run_queue.id"))
    session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_sessions.id"))
    tool_call_id: Mapped[str] = mapped_column(Text)
    tool: Mapped[str] = mapped_column(Text)
    args: Mapped[dict[str, Any]] = mapped_column(JSONB)
    risk: Mapped[str] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text, server_default="pending")
    decided_by: Mapped[str | None] = mapped_column(Text)
    decided_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    decision_reason: Mapped[str | None] = mapped_column(Text)
    trust_seconds: Mapped[int | None] = mapped_column(Integer)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = _now()
    approver_role: Mapped[str | None] = mapped_column(Text)
    """The role a decider needs (`admin` or `owner`; None: anyone who sees the approval)."""
    allow_self_approval: Mapped[bool] = mapped_column(Boolean, server_default="true")
    """False: the run's own user may not decide it."""


class ToolTrust(Base):
    """A `trustSeconds` grant: calls of `tool` (a name or pattern) in a session need no approval."""

    __tablename__ = "tool_trust"
    id: Mapped[uuid.UUID] = _pk_uuid()
    tenant_id: Mapped[str] = mapped_column(Text)
    session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_sessions.id"))
    tool: Mapped[str] = mapped_column(Text)
    approval_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("tool_approvals.id"))
    granted_by: Mapped[str] = mapped_column(Text)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = _now()


class IdempotencyKey(Base):
    """The first answer to a request sent with an `Idempotency-Key`, per tenant and user."""

    __tablename__ = "idempotency_keys"
    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    user_id: Mapped[str] = mapped_column(Text, primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    request_hash: Mapped[str] = mapped_column(Text)
    """sha256 of the canonical JSON of the operation and its request body."""
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_run_queue.id"))
    status_code: Mapped[int] = mapped_column(Integer)
    response: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    """The first answer's JSON body; None when it was streamed (the run is streamed again)."""
    created_at: Mapped[datetime] = _now()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AuditEvent(Base):
    """Who did what to which thing, when (append-only: no UPDATE or DELETE for any app role)."""

    __tablename__ = "audit_events"
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(Text)
    actor_id: Mapped[str] = mapped_column(Text)
    actor_role: Mapped[str] = mapped_column(Text)
    action: Mapped[str] = mapped_column(Text)
    """`<target>.<verb>`, e.g. `agent.updated`, `approval.denied`, `run.created`."""
    target_type: Mapped[str] = mapped_column(Text)
    target_id: Mapped[str | None] = mapped_column(Text)
    before: Mapped[dict[str, Any] | None] = mapped_column(JSONB(none_as_null=True))
    after: Mapped[dict[str, Any] | None] = mapped_column(JSONB(none_as_null=True))
    request_id: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()


class TenantProviderKey(Base):
    """A tenant's own API key (and endpoint) for one model provider, AES-GCM encrypted."""

    __tablename__ = "tenant_provider_keys"
    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    provider: Mapped[str] = mapped_column(Text, primary_key=True)
    """`gemini` or `openai`."""
    key_id: Mapped[str] = mapped_column(Text)
    """The SECRETS_KEY entry that encrypted it."""
    nonce: Mapped[bytes] = mapped_column(LargeBinary)
    ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    last4: Mapped[str] = mapped_column(Text)
    base_url: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class TenantQuota(Base):
    """A tenant's overrides of the `QUOTA_*` settings (NULL: the deployment's default)."""

    __tablename__ = "tenant_quotas"
    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    runs_per_minute: Mapped[int | None] = mapped_column(Integer)
    active_runs: Mapped[int | None] = mapped_column(Integer)
    queued_runs: Mapped[int | None] = mapped_column(Integer)
    tokens_per_day: Mapped[int | None] = mapped_column(BigInteger)
    updated_by: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = _now()


class TenantUsageDaily(Base):
    """A tenant's model tokens (and runs started) per UTC day, summed over its shard rows."""

    __tablename__ = "tenant_usage_daily"
    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    shard: Mapped[int] = mapped_column(SmallInteger, primary_key=True, server_default="0")
    """One of 16 rows per tenant and day (migration 0024): a writer adds to a random one."""
    input_tokens: Mapped[int] = mapped_column(BigInteger, server_default="0")
    output_tokens: Mapped[int] = mapped_column(BigInteger, server_default="0")
    runs: Mapped[int] = mapped_column(Integer, server_default="0")


class TenantClaim(Base):
    """When a tenant last had a run claimed (fair claiming; the worker role's bookkeeping)."""

    __tablename__ = "tenant_claims"
    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    last_claimed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class QueueLane(Base):
    """A session with queued or active runs: its first queued run and whether a run holds it
    (kept by the trigger `agent_runtime_lane_sync`, read by the claim; migration 0023)."""

    __tablename__ = "queue_lanes"
    session_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("agent_sessions.id", ondelete="CASCADE"), primary_key=True
    )
    tenant_id: Mapped[str] = mapped_column(Text)
    head_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    head_seq: Mapped[int | None] = mapped_column(BigInteger)
    ready_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    busy: Mapped[bool] = mapped_column(Boolean)


class TenantMember(Base):
    """A user seen in the tenant's tokens and the role their latest token gave them."""

    __tablename__ = "tenant_members"
    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    user_id: Mapped[str] = mapped_column(Text, primary_key=True)
    role: Mapped[str] = mapped_column(Text)
    first_seen_at: Mapped[datetime] = _now()
    last_seen_at: Mapped[datetime] = _now()


class TenantHttpTool(Base):
    """A tenant's HTTP endpoint offered as a tool (`app/tools/http/`); headers and signing
    secret AES-GCM encrypted, bound to the tenant and the row's id."""

    __tablename__ = "tenant_http_tools"
    id: Mapped[uuid.UUID] = _pk_uuid()
    tenant_id: Mapped[str] = mapped_column(Text)
    name: Mapped[str] = mapped_column(Text)
    agent_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("agents.id"))
    """NULL: every agent of the tenant."""
    description: Mapped[str] = mapped_column(Text)
    parameters: Mapped[dict[str, Any]] = mapped_column(JSONB)
    url: Mapped[str] = mapped_column(Text)
    method: Mapped[str] = mapped_column(Text)
    timeout_seconds: Mapped[float] = mapped_column(Float)
    risk: Mapped[str] = mapped_column(Text)
    header_hints: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    """Header name → the value's last 4 characters (or null when too short to show any)."""
    headers_key_id: Mapped[str | None] = mapped_column(Text)
    headers_nonce: Mapped[bytes | None] = mapped_column(LargeBinary)
    headers_sealed: Mapped[bytes | None] = mapped_column(LargeBinary)
    secret_key_id: Mapped[str] = mapped_column(Text)
    secret_nonce: Mapped[bytes] = mapped_column(LargeBinary)
    secret_sealed: Mapped[bytes] = mapped_column(LargeBinary)
    secret_rotated_at: Mapped[datetime] = _now()
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()


class TenantMcpServer(Base):
    """An MCP server a tenant attached as a tool source (`app/tools/mcp/store.py`)."""

    __tablename__ = "tenant_mcp_servers"
    tenant_id: Mapped[str] = mapped_column(Text, primary_key=True)
    name: Mapped[str] = mapped_column(Text, primary_key=True)
    agent_id: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("agents.id", ondelete="CASCADE")
    )
    """The one agent whose runs get it (None: every agent of the tenant)."""
    transport: Mapped[str] = mapped_column(Text)
    """`http` (streamable HTTP) or `stdio`."""
    enabled: Mapped[bool] = mapped_column(Boolean, server_default="true")
    config: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    """What may be shown: url, command, args, header and env names, risk, toolRisk, timeout."""
    key_id: Mapped[str | None] = mapped_column(Text)
    """The SECRETS_KEY entry that sealed the header and env values (None: it has none)."""
    nonce: Mapped[bytes | None] = mapped_column(LargeBinary)
    ciphertext: Mapped[bytes | None] = mapped_column(LargeBinary)
    version: Mapped[int] = mapped_column(Integer, server_default="1")
    """Raised by every write: the workers' connections are keyed by it."""
    updated_by: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = _now()
    updated_at: Mapped[datetime] = _now()
