"""Sub-agents, store side: spawning a child run (limits, rows, event) in one tenant transaction,
collecting children's outcomes for `sessions_wait`, and reading a run's tree of children.

Every function takes an `AsyncSession` opened with `Database.tenant(...)`: RLS confines it to the
tenant, so another tenant's agent, run or spawn does not exist here. A child's outcome is
recorded and announced to its parent by the run-ended trigger (migration 0006), not here.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import exists, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.agents.store import get_agent
from app.auth.principal import Principal
from app.core.errors import NotFoundError
from app.core.events import SubagentSpawnedEvent
from app.db.models import Agent, AgentSession, Run, RunInboxItem, SubagentSpawn
from app.queue.event_log import emit_unleased
from app.queue.manager import RunQueue
from app.queue.sql import query

LIVE_STATUSES = ("queued", "running", "awaiting_approval", "waiting")
"""A run in one of these has not ended (a live child counts against the tenant's limit)."""
ENDED_SPAWN_STATUSES = ("completed", "failed", "cancelled", "timed_out")


class SpawnRefused(Exception):
    """A spawn or wait the store will not do; `message` is for the model."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class SpawnLimits:
    """The server's defaults (an agent's settings override the first two)."""

    max_depth: int
    max_children_per_run: int
    max_concurrent_per_tenant: int
    run_timeout_seconds: int


@dataclass(frozen=True, slots=True)
class SpawnRequest:
    """One `sessions_spawn` call of a running run."""

    parent_run_id: UUID
    tool_call_id: str
    task: str
    agent_id: UUID | None = None
    label: str | None = None
    timeout_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class Spawned:
    """The child of a spawn (`created`: False when the call had already spawned it)."""

    child_run_id: UUID
    child_session_key: str
    created: bool


def agent_setting(agent: Agent | None, key: str) -> int | None:
    """An integer limit from the agent's `settings` JSON (camelCase key), if set.

    (`app.runtime.agent_settings` validates these when they are written; the tools layer cannot
    import it, so it reads the one key it needs.)
    """
    value = None if agent is None else (agent.settings or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


async def _lock_tenant(s: AsyncSession, tenant_id: str) -> None:
    """Serialise the tenant's spawns until the transaction ends (the limits are counted after)."""
    await s.execute(
        text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"),
        {"key": f"agent-runtime:subagents:{tenant_id}"},
    )


async def run_depth(s: AsyncSession, run: Run) -> int:
    """How deep in a spawn chain `run` is: 0 for a user's run; a child's spawn depth, also for a
    follow-up run in a child's session."""
    depth = await s.scalar(select(SubagentSpawn.depth).where(SubagentSpawn.child_run_id == run.id))
    if depth is None:
        depth = await s.scalar(
            select(func.max(SubagentSpawn.depth)).where(
                SubagentSpawn.child_session_id == run.session_id
            )
        )
    return depth or 0


async def spawn_child(
    s: AsyncSession,
    queue: RunQueue,
    principal: Principal,
    request: SpawnRequest,
    limits: SpawnLimits,
) -> Spawned:
    """Spawn a child run for `request` (or find the one this call already spawned).

    In the caller's transaction: the limits (depth, children of the run, live children of the
    tenant, counted under a per-tenant advisory lock), the child's session
    `<parentSessionKey>:sub:<8 hex>` and run (`parent_run_id`, `deadline_at`), the spawn row and
    `subagent.spawned` on the parent. Raises `SpawnRefused` when a limit or the agent says no.
    """
    await _lock_tenant(s, principal.tenant_id)
    existing = await s.scalar(
        select(SubagentSpawn).where(
            SubagentSpawn.parent_run_id == request.parent_run_id,
            SubagentSpawn.tool_call_id == request.tool_call_id,
        )
    )
    if existing is not None and existing.child_run_id is not None:
        return Spawned(existing.child_run_id, existing.child_session_key or "", created=False)

    found = (
        await s.execute(
            select(Run, AgentSession.session_key)
            .join(AgentSession, AgentSession.id == Run.session_id)
            .where(Run.id == request.parent_run_id)
            .with_for_update(of=Run)
        )
    ).one_or_none()
    if found is None:
        raise SpawnRefused(f"run {request.parent_run_id} not found")
    parent, parent_key = found
    if parent.status not in LIVE_STATUSES or parent.cancel_requested_at is not None:
        raise SpawnRefused("this run is ending: no sub-agent may be spawned")
    parent_agent = await s.get(Agent, parent.agent_id)

    depth = await run_depth(s, parent) + 1
    max_depth = agent_setting(parent_agent, "maxSpawnDepth") or limits.max_depth
    if depth > max_depth:
        raise SpawnRefused(
            f"spawn depth limit reached: this run is at depth {depth - 1} and sub-agents may "
            f"nest at most {max_depth} deep"
        )
    per_run = agent_setting(parent_agent, "maxChildrenPerRun") or limits.max_children_per_run
    spawned = await s.scalar(
        select(func.count())
        .select_from(SubagentSpawn)
        .where(SubagentSpawn.parent_run_id == parent.id)
    )
    if (spawned or 0) >= per_run:
        raise SpawnRefused(f"sub-agent limit reached: a run may spawn at most {per_run}")
    live = await s.scalar(
        select(func.count())
        .select_from(Run)
        .where(Run.parent_run_id.is_not(None), Run.status.in_(LIVE_STATUSES))
    )
    if (live or 0) >= limits.max_concurrent_per_tenant:
        raise SpawnRefused(
            f"too many sub-agents running: at most {limits.max_concurrent_per_tenant} may be "
            "live in this workspace at once; wait for some to finish (sessions_wait)"
        )

    child_agent = parent_agent
    if request.agent_id is not None:
        child_agent = await get_agent(s, request.agent_id)
        if child_agent is None:
            raise SpawnRefused(f"agent {request.agent_id} not found")
    if child_agent is None:
        raise SpawnRefused(f"agent {parent.agent_id} of this run not found")
    timeout = (
        request.timeout_seconds
        or agent_setting(child_agent, "timeoutSeconds")
        or limits.run_timeout_seconds
    )
    child_key = f"{parent_key}:sub:{secrets.token_hex(4)}"
    try:
        enqueued = await queue.enqueue_in(
            s,
            principal,
            message=request.task,
            session_key=child_key,
            agent_id=child_agent.id,
            parent_run_id=parent.id,
            timeout_seconds=timeout,
        )
    except NotFoundError as exc:  # the agent vanished between the two reads
        raise SpawnRefused(exc.message) from None
    child_session = await s.scalar(select(Run.session_id).where(Run.id == enqueued.run_id))
    s.add(
        SubagentSpawn(
            tenant_id=principal.tenant_id,
            parent_run_id=parent.id,
            parent_session_id=parent.session_id,
            child_session_id=child_session,
            child_run_id=enqueued.run_id,
            agent_id=child_agent.id,
            task=request.task,
            status="running",
            tool_call_id=request.tool_call_id,
            label=request.label,
            child_session_key=child_key,
            depth=depth,
            timeout_seconds=timeout,
        )
    )
    await s.flush()
    await emit_unleased(
        s,
        parent.id,
        principal.tenant_id,
        [
            SubagentSpawnedEvent(
                child_run_id=enqueued.run_id,
                child_session_key=child_key,
                task=request.task,
                label=request.label,
                agent_id=child_agent.id,
            )
        ],
    )
    return Spawned(enqueued.run_id, child_key, created=True)


# ---------------------------------------------------------------------- sessions_wait


@dataclass(frozen=True, slots=True)
class WaitProgress:
    """What a `sessions_wait` call has so far: the outcomes it consumed (or that were delivered
    before), the children still running, its deadline and whether a user's message waits."""

    results: list[dict[str, Any]]
    pending: list[UUID]
    deadline: datetime
    now: datetime
    steer_waiting: bool

    @property
    def timed_out(self) -> bool:
        """The wait's deadline has passed."""
        return self.now >= self.deadline


def outcome_of(payload: dict[str, Any]) -> dict[str, Any]:
    """A child's outcome as `sessions_wait` returns it."""
    # label, status and outcome first: a reader that cuts the JSON short still sees them
    entry: dict[str, Any] = {"label": payload.get("label"), "status": payload.get("status")}
    if payload.get("status") == "completed":
        result = payload.get("result")
        entry["result"] = result.get("text", "") if isinstance(result, dict) else ""
    else:
        error = payload.get("error")
        entry["error"] = (
            error if isinstance(error, dict) else {"code": payload.get("status"), "message": ""}
        )
    entry["childRunId"] = str(payload.get("childRunId"))
    entry["childSessionKey"] = payload.get("childSessionKey")
    return entry


def _spawn_outcome(spawn: SubagentSpawn) -> dict[str, Any]:
    return outcome_of(
        {
            "childRunId": spawn.child_run_id,
            "childSessionKey": spawn.child_session_key,
            "label": spawn.label,
            "status": spawn.status,
            "result": spawn.result,
            "error": spawn.error,
        }
    )


async def collect_outcomes(
    s: AsyncSession,
    *,
    run_id: UUID,
    tool_call_id: str,
    run_ids: list[UUID] | None,
    timeout_seconds: int,
) -> WaitProgress:
    """Consume the outcomes `sessions_wait` call `tool_call_id` of run `run_id` waits for.

    Awaited: `run_ids` (each must be a child of the run, else `SpawnRefused`), else every child
    whose outcome was not delivered otherwise (still running, undelivered, or consumed by this
    very call before). Their undelivered outcomes are marked delivered to this call (`tool`), so
    a re-execution of the call finds the same ones. The deadline is counted from the call's
    first `tool.started`, so it survives the run being parked and resumed.
    """
    spawns = list(
        await s.scalars(
            select(SubagentSpawn)
            .where(SubagentSpawn.parent_run_id == run_id, SubagentSpawn.child_run_id.is_not(None))
            .order_by(SubagentSpawn.created_at, SubagentSpawn.id)
        )
    )
    by_child = {sp.child_run_id: sp for sp in spawns}
    inbox = (
        await s.execute(
            select(
                RunInboxItem.source_run_id, RunInboxItem.delivered_at, RunInboxItem.tool_call_id
            ).where(RunInboxItem.run_id == run_id, RunInboxItem.kind == "subagent")
        )
    ).all()
    if run_ids is not None:
        strangers = [str(r) for r in run_ids if r not in by_child]
        if strangers:
            raise SpawnRefused(f"not sub-agents of this run: {', '.join(strangers)}")
        awaited = list(dict.fromkeys(run_ids))
    else:
        open_ = {
            i.source_run_id
            for i in inbox
            if i.delivered_at is None or i.tool_call_id == tool_call_id
        }
        awaited = [
            child
            for child, sp in by_child.items()
            if child is not None and (sp.status not in ENDED_SPAWN_STATUSES or child in open_)
        ]
    await s.execute(
        update(RunInboxItem)
        .where(
            RunInboxItem.run_id == run_id,
            RunInboxItem.kind == "subagent",
            RunInboxItem.delivered_at.is_(None),
            RunInboxItem.source_run_id.in_(awaited),
        )
        .values(
            delivered_at=func.now(),
            delivery="tool",
            tool_call_id=tool_call_id,
            delivered_to_run_id=run_id,
        )
    )
    mine = {
        row.source_run_id: row.payload
        for row in await s.execute(
            select(RunInboxItem.source_run_id, RunInboxItem.payload).where(
                RunInboxItem.run_id == run_id,
                RunInboxItem.kind == "subagent",
                RunInboxItem.tool_call_id == tool_call_id,
            )
        )
    }
    results: list[dict[str, Any]] = []
    pending: list[UUID] = []
    for child in awaited:
        spawn = by_child[child]
        if child in mine:
            results.append(outcome_of({**mine[child], "label": spawn.label}))
        elif spawn.status in ENDED_SPAWN_STATUSES:
            results.append(_spawn_outcome(spawn))
        else:
            pending.append(child)
    clock = (
        await s.execute(query("wait_clock"), {"run_id": run_id, "tool_call_id": tool_call_id})
    ).one()
    steer = await s.scalar(
        select(
            exists().where(
                RunInboxItem.run_id == run_id,
                RunInboxItem.kind == "steer",
                RunInboxItem.delivered_at.is_(None),
            )
        )
    )
    return WaitProgress(
        results=results,
        pending=pending,
        deadline=clock.started_at + timedelta(seconds=timeout_seconds),
        now=clock.now,
        steer_waiting=bool(steer),
    )


# ---------------------------------------------------------------------- reading the tree


@dataclass(frozen=True, slots=True)
class ChildNode:
    """A spawned child run and, recursively, its own children."""

    run_id: UUID
    session_key: str | None
    label: str | None
    task: str
    status: str
    agent_id: UUID | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    created_at: datetime
    finished_at: datetime | None
    children: list[ChildNode]


MAX_TREE_LEVELS = 20
"""How deep `child_tree` reads (spawn depth is capped at 10)."""


async def child_tree(
    s: AsyncSession, run_id: UUID, *, levels: int = MAX_TREE_LEVELS
) -> list[ChildNode]:
    """The children `run_id` spawned, each with its own children down to `levels` levels
    (spawn order)."""
    rows = (await s.execute(query("spawn_tree"), {"run_id": run_id, "levels": levels})).all()
    nodes: dict[UUID, ChildNode] = {}
    roots: list[ChildNode] = []
    for row in rows:  # parents come before their children (ordered by level)
        node = ChildNode(
            run_id=row.child_run_id,
            session_key=row.child_session_key,
            label=row.label,
            task=row.task,
            status=row.status,
            agent_id=row.agent_id,
            result=row.result,
            error=row.error,
            created_at=row.created_at,
            finished_at=row.finished_at,
            children=[],
        )
        nodes[node.run_id] = node
        parent = nodes.get(row.parent_run_id)
        (parent.children if parent is not None else roots).append(node)
    return roots


async def direct_children(s: AsyncSession, run_id: UUID) -> list[ChildNode]:
    """The children `run_id` spawned (without theirs)."""
    return await child_tree(s, run_id, levels=1)
