"""The run queue's lifecycle verbs: enqueue, claim, renew, recover, give up, release, cancel.

API-side verbs run under RLS as the caller's tenant; the worker-side cross-tenant verbs
(`claim_batch`, `renew_leases`, `recover_expired`, `release`) run as `agent_runtime_worker`.
Writes made *while running* a claimed run go through `app.queue.lease.LeasedRun` (fenced). The
claim and every other lane statement are named SQL in `queries.sql`.

A run whose worker keeps dying (a tool that runs the process out of memory, say) is not taken
over forever: when its lease expires for the `max_run_attempts`-th time, `fail_exhausted` fails
it `worker_crashed` and its lane moves on. The worker role finds such runs (it may not write
events); each is failed, with its `run.failed` event, in a transaction of its own tenant.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from sqlalchemy import ColumnElement, Float, cast, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.agents.store import default_agent, get_agent
from app.auth.principal import Principal
from app.core.errors import ConflictError, ForbiddenError, NotFoundError
from app.core.events import EventError, RunCancelledEvent, RunFailedEvent
from app.db.engine import Database
from app.db.models import Agent, AgentSession, Run, ToolExecution
from app.observability import metrics
from app.queue.busy import (
    IfBusy,
    Lane,
    LaneContendedError,
    PostedStatus,
    close_approvals,
    if_busy_setting,
    insert_run,
    is_lock_failure,
    lock_session,
    post_message,
    retry_contended,
)
from app.queue.event_log import emit_unleased
from app.queue.run_audit import run_cancelled, run_failed, tool_executed
from app.queue.sql import query
from app.tenants.quotas import QuotaDefaults, add_tokens, admit_run


@dataclass(frozen=True, slots=True)
class EnqueuedRun:
    """What `POST /api/agent-runtime` returns."""

    run_id: UUID
    session_key: str
    status: PostedStatus = "queued"
    """`queued`: a run of its own; `steered`: into the live run `run_id`; `collected`: into the
    collecting run `run_id` (`app.queue.busy`)."""
    merged: bool = False
    """`collected` into a collecting run that was already queued."""


@dataclass(frozen=True, slots=True)
class ClaimedRun:
    """A run a worker has just claimed (and holds the lease of)."""

    id: UUID
    tenant_id: str
    user_id: str
    session_id: UUID
    agent_id: UUID
    attempt: int
    input: dict[str, Any]
    cancel_requested: bool
    lease_expiries: int = 0
    """How many earlier claims ended with their lease expiring (the worker died or froze)."""
    trace_context: dict[str, str] | None = None
    """The W3C trace context the run was enqueued under (tracing on), continued by the worker."""
    queued_seconds: float = 0.0
    """Time from the run's enqueue (or the end of its debounce window) to this claim."""
    started_stored: bool = False
    """The claim stored the run's `run.started` / `run.resumed` event (it does unless the run is
    to be cancelled or given up on: `cancel_requested`, lease expired `max_run_attempts` times)."""

    @property
    def principal(self) -> Principal:
        """The run's user, for tenant-scoped transactions made on its behalf."""
        return Principal(user_id=self.user_id, tenant_id=self.tenant_id, role="service")


@dataclass(frozen=True, slots=True)
class ClaimBatch:
    """What one claim statement took (`RunQueue.claim_batch`)."""

    runs: list[ClaimedRun]
    """The runs claimed, at most one per session, in queue order."""
    next_window: float | None
    """Seconds until the earliest collect window of a claimable lane ends (None: none): nothing
    notifies that, so an idle worker claims again no later than this. 0 after a lost race."""


@dataclass(frozen=True, slots=True)
class ExhaustedRun:
    """A running run whose lease expired for the `max_run_attempts`-th time (`expired_at_limit`)."""

    id: UUID
    tenant_id: str
    user_id: str
    attempt: int
    """The claim whose lease expired: `fail_crashed` fails the run only if it is still that one."""
    stops: int
    """How many times its worker stopped, this one included."""

    @property
    def principal(self) -> Principal:
        """The run's user, whose tenant transaction fails it."""
        return Principal(user_id=self.user_id, tenant_id=self.tenant_id, role="service")


def worker_crashed_error(stops: int, limit: int) -> dict[str, str]:
    """The `error` of a run given up on because its worker stopped `stops` times."""
    return {
        "code": "worker_crashed",
        "message": f"the run's worker stopped {stops} times (MAX_RUN_ATTEMPTS={limit}); giving up",
    }


def new_session_key() -> str:
    """A fresh, unguessable session key."""
    return f"s_{secrets.token_urlsafe(16)}"


async def interrupt_started_calls(
    s: AsyncSession, principal: Principal, run_id: UUID, reason: str
) -> None:
    """A run given up on mid-call: its calls left `started` by a dead worker become `interrupted`
    (no attempt will record their outcome; this is where `GET /runs/{id}/tools` shows which call
    was in flight when the worker died), each with its `tool.executed` audit event."""
    rows = await s.execute(
        update(ToolExecution)
        .where(ToolExecution.run_id == run_id, ToolExecution.status == "started")
        .values(status="interrupted", error={"message": reason}, finished_at=func.now())
        .returning(
            ToolExecution.id,
            ToolExecution.tool_call_id,
            ToolExecution.name,
            ToolExecution.args,
            execution_ms(),
        )
    )
    for row in rows.all():
        await tool_executed(
            s,
            principal,
            run_id=run_id,
            execution_id=row[0],
            tool_call_id=row[1],
            name=row[2],
            args=row[3],
            outcome="interrupted",
            duration_ms=row[4],
        )


def execution_ms() -> ColumnElement[float]:
    """A `tool_executions` row's duration in milliseconds (its `started_at` to `finished_at`),
    for a RETURNING clause of the statement that finishes it."""
    elapsed = ToolExecution.finished_at - ToolExecution.started_at
    return cast(func.extract("epoch", elapsed) * 1000, Float)


async def _close_approvals(s: AsyncSession, run_id: UUID, user_id: str) -> None:
    """A cancelled run's pending approval expires; its waiting call is recorded as failed."""
    await close_approvals(s, run_id, f"run cancelled by {user_id}")


class RunQueue:
    """Lifecycle verbs of the lane queue over one `Database`."""

    def __init__(
        self,
        db: Database,
        *,
        default_model: str = "offline",
        max_turns: int = 8,
        max_run_attempts: int = 5,
        collect_window_seconds: float = 2.0,
        quotas: QuotaDefaults | None = None,
    ) -> None:
        self.db = db
        self.quotas = quotas or QuotaDefaults()
        """The deployment's default limits (`QUOTA_*`), checked by `enqueue_in(check_quotas=True)`."""
        self.default_model = default_model
        self.max_turns = max_turns
        self.max_run_attempts = max_run_attempts
        """Lease expiries after which a run is failed, not recovered (`MAX_RUN_ATTEMPTS`)."""
        self.collect_window_seconds = collect_window_seconds

    # ------------------------------------------------------------------ API side (RLS)

    async def enqueue_run(
        self,
        principal: Principal,
        *,
        message: str,
        session_key: str | None = None,
        agent_id: UUID | None = None,
        if_busy: IfBusy | None = None,
    ) -> EnqueuedRun:
        """Post `message` to the session's lane (creating the session if new), as `if_busy`
        says (`app.queue.busy`; None: the agent's setting)."""

        async def attempt() -> EnqueuedRun:
            async with self.db.tenant(principal) as s:
                return await self.enqueue_in(
                    s,
                    principal,
                    message=message,
                    session_key=session_key,
                    agent_id=agent_id,
                    if_busy=if_busy,
                )

        return await retry_contended(attempt)

    async def enqueue_in(
        self,
        s: AsyncSession,
        principal: Principal,
        *,
        message: str,
        session_key: str | None = None,
        agent_id: UUID | None = None,
        extra_input: dict[str, Any] | None = None,
        parent_run_id: UUID | None = None,
        timeout_seconds: int | None = None,
        if_busy: IfBusy | None = None,
        check_quotas: bool = False,
    ) -> EnqueuedRun:
        """`enqueue_run` in the caller's tenant transaction (which may write more, e.g. the
        request's idempotency key, and commits or rolls back the run with it). Raises
        SessionBusyError (`reject`) and LaneContendedError: roll back and call again
        (`app.queue.busy.retry_contended`).

        Runs posted by tools are always queued at the end of the lane (`if_busy` does not
        apply): `extra_input`, more keys of the run's input beside `message` (e.g. `from`: a
        `sessions_send` sender); `parent_run_id`, the run spawning this one (a sub-agent's run);
        `timeout_seconds`, the run's hard deadline from now (`deadline_at`: it fails
        `run_timeout` then, queued or not).

        `check_quotas` (the API's posts): a new run must pass the tenant's quotas
        (`app.tenants.quotas.admit_run`, QuotaExceededError); a message steered or collected into
        a live run is not a new run and passes. Every new run counts in the tenant's day.
        """
        if agent_id is not None:
            agent = await get_agent(s, agent_id)
            if agent is None:
                raise NotFoundError("agentId", f"agent {agent_id} not found")
        else:
            agent = None
        key = session_key or new_session_key()
        agent_session, session_if_busy = await self._get_or_create_session(
            s, principal, key, agent, fresh=session_key is None
        )
        if agent is not None:
            if_busy = if_busy or if_busy_setting(agent.settings.get("ifBusy"))
        else:
            if_busy = if_busy or session_if_busy
        lane = Lane(
            session_id=agent_session.id,
            session_key=key,
            agent_id=agent.id if agent is not None else agent_session.agent_id,
        )
        if extra_input is not None or parent_run_id is not None or timeout_seconds is not None:
            await lock_session(s, lane.session_id)
            run_id = await insert_run(
                s,
                principal,
                lane,
                {**(extra_input or {}), "message": message},
                parent_run_id=parent_run_id,
                deadline_seconds=timeout_seconds,
            )
            await add_tokens(s, principal.tenant_id, 0, 0, runs=1)
            return EnqueuedRun(run_id=run_id, session_key=key)

        async def admit() -> None:
            await admit_run(s, principal, self.quotas)

        posted = await post_message(
            s,
            principal,
            lane,
            message,
            if_busy=if_busy,
            collect_window_seconds=self.collect_window_seconds,
            admit=admit if check_quotas else None,
            session_locked=True,  # `_get_or_create_session` updated or inserted its row
        )
        if posted.status == "queued" or (posted.status == "collected" and not posted.merged):
            await add_tokens(s, principal.tenant_id, 0, 0, runs=1)
        return EnqueuedRun(
            run_id=posted.run_id,
            session_key=posted.session_key,
            status=posted.status,
            merged=posted.merged,
        )

    async def _get_or_create_session(
        self,
        s: AsyncSession,
        principal: Principal,
        key: str,
        agent: Agent | None,
        *,
        fresh: bool = False,
    ) -> tuple[AgentSession, IfBusy | None]:
        """The session with this key (touched for a new post, its row locked by this
        transaction), created if new (`fresh`: a key just generated, not looked up); and its
        agent's `ifBusy` setting when known without another read (None: not read)."""
        if not fresh:
            touched = await self._touch_own_session(s, principal, key)
            if touched is not None:
                return touched
            existing = await self._visible_session(s, principal, key)
            if existing is not None:
                return existing, None
        if agent is None:
            agent = await default_agent(
                s, principal, model=self.default_model, max_turns=self.max_turns
            )
        # DO NOTHING, not DO UPDATE: a key taken by a session this caller may not see (another
        # member's private one) must not reach the UPDATE policy, which would raise.
        created: AgentSession | None = await s.scalar(
            insert(AgentSession)
            .values(
                tenant_id=principal.tenant_id,
                session_key=key,
                agent_id=agent.id,
                user_id=principal.user_id,
                last_run_at=func.now(),
            )
            .on_conflict_do_nothing(constraint="agent_sessions_tenant_key_key")
            .returning(AgentSession)
        )
        if created is not None:
            return created, if_busy_setting(agent.settings.get("ifBusy"))
        raced = await self._visible_session(s, principal, key)  # created concurrently
        if raced is not None:
            return raced, None
        raise ConflictError(
            f"session key {key!r} belongs to another user's private session; "
            "use another key (or omit sessionKey for a new one)"
        )

    async def _touch_own_session(
        self, s: AsyncSession, principal: Principal, key: str
    ) -> tuple[AgentSession, IfBusy] | None:
        """The common post, in one statement: the session with this key that the caller may
        post to, touched (which locks its row), with its agent's `ifBusy`. None when no such
        row was updated (a new key, a session the caller may not post to, one the write policy
        hides): `_visible_session` then reads it and says why."""
        if_busy = (
            select(Agent.settings["ifBusy"].astext)
            .where(Agent.id == AgentSession.agent_id)
            .correlate(AgentSession)
            .scalar_subquery()
        )
        touch = (
            update(AgentSession)
            .where(AgentSession.tenant_id == principal.tenant_id, AgentSession.session_key == key)
            .values(last_run_at=func.now(), updated_at=func.now())
            .returning(AgentSession, if_busy)
            .execution_options(synchronize_session=False)
        )
        if principal.role == "member":  # as `_visible_session`: members post to their own only
            touch = touch.where(AgentSession.user_id == principal.user_id)
        try:
            row = (await s.execute(touch)).one_or_none()
        except DBAPIError as exc:
            # Waiting for the session row, this post can close a lock cycle (a post holding
            # the row waits for a run row a worker holds, which waits for the session row):
            # chosen as the deadlock's victim, it rolls back and posts again like any other.
            if is_lock_failure(exc):
                raise LaneContendedError(f"session {key!r} is contended") from exc
            raise
        if row is None:
            return None
        return row[0], if_busy_setting(row[1])

    async def _visible_session(
        self, s: AsyncSession, principal: Principal, key: str
    ) -> AgentSession | None:
        """The session with this key the caller can see, touched for a new post; None when
        there is none. ForbiddenError for a member posting to someone else's shared session
        (read-only for everyone but its user; owners/admins and the runtime may post)."""
        existing = await s.scalar(
            select(AgentSession).where(
                AgentSession.tenant_id == principal.tenant_id, AgentSession.session_key == key
            )
        )
        if existing is None:
            return None
        if principal.role == "member" and existing.user_id != principal.user_id:
            raise ForbiddenError(
                f"session {key!r} is shared read-only by its user: members may read it but "
                "not post to it (start your own session, or ask a tenant admin)",
                code="read_only_session",
                field="sessionKey",
            )
        await s.execute(
            update(AgentSession)
            .where(AgentSession.id == existing.id)
            .values(last_run_at=func.now(), updated_at=func.now())
        )
        return existing

    async def get_run(self, principal: Principal, run_id: UUID) -> tuple[Run, str] | None:
        """The run and its session key, if it belongs to the principal's tenant."""
        found = await self.run_status(principal, run_id)
        return None if found is None else (found[0], found[1])

    async def run_status(self, principal: Principal, run_id: UUID) -> tuple[Run, str, int] | None:
        """The run, its session key and its session's token count, if it belongs to the
        principal's tenant."""
        async with self.db.tenant(principal) as s:
            row = (
                await s.execute(
                    select(Run, AgentSession.session_key, AgentSession.token_count)
                    .join(AgentSession, AgentSession.id == Run.session_id)
                    .where(Run.id == run_id)
                )
            ).one_or_none()
        return None if row is None else (row[0], row[1], row[2])

    async def cancel(self, principal: Principal, run_id: UUID) -> str:
        """Cancel a run; returns its status afterwards (`cancelled`, or `running` while stopping).

        Raises NotFoundError for another tenant's or an unknown run (or another member's private
        one), ForbiddenError for a member and another user's run of a shared session,
        ConflictError when it has already finished some other way.
        """
        async with self.db.tenant(principal) as s:
            owner = await s.scalar(select(Run.user_id).where(Run.id == run_id))
            if owner is not None and principal.role == "member" and owner != principal.user_id:
                raise ForbiddenError(
                    f"run {run_id} is another user's (in a session shared read-only): only its "
                    "user or a tenant admin may cancel it",
                    code="read_only_session",
                    field="runId",
                )
            if await s.scalar(query("cancel_idle"), {"run_id": run_id}) is not None:
                await close_approvals(s, run_id, f"run cancelled by {principal.user_id}")
                await emit_unleased(
                    s, run_id, principal.tenant_id, [RunCancelledEvent(reason="cancelled")]
                )
                await run_cancelled(s, principal, run_id, stopping=False, reason="cancelled")
                return "cancelled"
            if await s.scalar(query("request_cancel_running"), {"run_id": run_id}) is not None:
                await run_cancelled(s, principal, run_id, stopping=True, reason="cancelled")
                return "running"
            status = await s.scalar(select(Run.status).where(Run.id == run_id))
        if status is None:
            raise NotFoundError("runId", f"run {run_id} not found")
        if status == "cancelled":
            return "cancelled"
        raise ConflictError(f"run already {status}")

    # ------------------------------------------------------------------ worker side

    async def claim_next(self, worker_id: str, lease_seconds: float) -> ClaimedRun | None:
        """Claim one run, fairly across tenants, or None (`claim_batch` with `limit=1`)."""
        claimed = await self.claim_batch(worker_id, lease_seconds, limit=1)
        return claimed.runs[0] if claimed.runs else None

    async def claim_batch(self, worker_id: str, lease_seconds: float, *, limit: int) -> ClaimBatch:
        """Claim up to `limit` runs in one statement (`claim_runs`), at most one per session,
        fairly across tenants (a worker with `limit` free slots fills them in one round trip),
        and learn when the next collect window ends.

        The claim reads the lane heads (`queue_lanes`), not the backlog. A head a concurrent
        claim holds is passed over for the next one, so parallel workers on one tenant's lanes
        never idle beside claimable runs. A lost race on the lane index claims nothing, with
        `next_window` 0: claim again at once (nothing will notify about those runs).
        """
        params = {
            "worker_id": worker_id,
            "lease_seconds": lease_seconds,
            "limit": limit,
            "max_attempts": self.max_run_attempts,
        }
        try:
            async with self.db.queue() as s:
                rows = (await s.execute(query("claim_runs"), params)).all()
        except IntegrityError:
            return ClaimBatch([], 0.0)  # another worker activated one of these lanes first
        window = rows[0].next_window if rows else None
        runs = [
            ClaimedRun(
                id=row.id,
                tenant_id=row.tenant_id,
                user_id=row.user_id,
                session_id=row.session_id,
                agent_id=row.agent_id,
                attempt=row.attempts,
                input=row.input,
                cancel_requested=row.cancel_requested,
                lease_expiries=row.lease_expiries,
                trace_context=row.trace_context,
                queued_seconds=float(row.queued_seconds or 0.0),
                started_stored=row.started,
            )
            for row in rows
            if row.id is not None  # nothing claimed: one row carrying only next_window
        ]
        return ClaimBatch(runs, None if window is None else max(0.0, float(window)))

    async def renew_leases(
        self, worker_id: str, run_ids: list[UUID], lease_seconds: float
    ) -> dict[UUID, bool]:
        """Extend this worker's leases; returns {run id still held: cancel requested}."""
        if not run_ids:
            return {}
        async with self.db.queue() as s:
            rows = await s.execute(
                query("renew_leases"),
                {"worker_id": worker_id, "run_ids": run_ids, "lease_seconds": lease_seconds},
            )
            return {r.id: r.cancel_requested for r in rows}

    async def recover_expired(self) -> list[UUID]:
        """Put runs with expired leases back at the head of their lanes, except those whose lease
        expired for the `max_run_attempts`-th time (`fail_exhausted` gives up on them)."""
        async with self.db.queue() as s:
            return list(
                await s.scalars(query("recover_expired"), {"max_attempts": self.max_run_attempts})
            )

    async def fail_exhausted(self) -> list[UUID]:
        """Fail every run whose lease expired for the `max_run_attempts`-th time with
        `worker_crashed`; returns the ones this call failed."""
        return [run.id for run in await self.expired_at_limit() if await self.fail_crashed(run)]

    async def expired_at_limit(self) -> list[ExhaustedRun]:
        """The running runs whose lease expired for the `max_run_attempts`-th time (unchanged)."""
        async with self.db.queue() as s:
            rows = await s.execute(
                query("expired_at_limit"), {"max_attempts": self.max_run_attempts}
            )
            return [
                ExhaustedRun(
                    id=r.id,
                    tenant_id=r.tenant_id,
                    user_id=r.user_id,
                    attempt=r.attempts,
                    stops=r.stops,
                )
                for r in rows
            ]

    async def fail_crashed(self, run: ExhaustedRun) -> bool:
        """Finish `run` failed (`worker_crashed`) with its `run.failed` event, in one transaction
        of its tenant; its lane moves on. False (nothing done) when it is no longer that expired
        claim: another sweep failed it first, or its worker renewed it after all.

        A process that dies before this commits leaves the run as it was (running, lease
        expired), so the next sweep finds it again.
        """
        error = worker_crashed_error(run.stops, self.max_run_attempts)
        async with self.db.tenant(run.principal) as s:
            failed = (
                await s.execute(
                    query("fail_crashed"),
                    {"run_id": run.id, "attempt": run.attempt, "error": json.dumps(error)},
                )
            ).one_or_none()
            if failed is None:
                return False
            await interrupt_started_calls(s, run.principal, run.id, error["message"])
            event = RunFailedEvent(error=EventError.model_validate(error))
            await emit_unleased(s, run.id, run.tenant_id, [event])
            await run_failed(s, run.principal, run.id, error)
        metrics.observe_run_finished("failed", failed.duration_seconds)
        return True

    async def wake_overdue(self) -> list[UUID]:
        """Requeue `waiting` runs whose wait timed out (head of their lanes)."""
        async with self.db.queue() as s:
            return list(await s.scalars(query("wake_overdue")))

    async def release(self, worker_id: str, run_ids: list[UUID]) -> list[UUID]:
        """Hand runs back to the queue (graceful shutdown)."""
        if not run_ids:
            return []
        async with self.db.queue() as s:
            return list(
                await s.scalars(query("release_runs"), {"worker_id": worker_id, "run_ids": run_ids})
            )
