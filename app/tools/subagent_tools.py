"""The sub-agent tools (group `sessions`): `sessions_spawn` and `sessions_wait`.

`sessions_spawn` starts a child run in a session of its own (`<parentSessionKey>:sub:<8 hex>`,
same user, the given agent or this run's) and returns at once; the child runs on any worker.
When it ends, its outcome reaches this run once (the run-ended trigger, migration 0006): read by
`sessions_wait`, else injected as a message before the next model turn, else — this run having
ended — as a follow-up run in this session. `sessions_wait` blocks until children end: the run
is parked `waiting` (no worker slot) and executed again when one ends, when a user's message
arrives, or at the wait's deadline.

Both are idempotent by their tool call id (a worker that died mid-call, a parked wait resumed):
a spawn call finds the child it already spawned, a wait call finds the outcomes it already
consumed and keeps the deadline of its first start. Limits (depth, children per run, live
children per tenant) are tool errors: the model reads them and the run goes on. See
docs/multi-agent.md.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from app.queue.manager import RunQueue
from app.queue.subagents import (
    SpawnLimits,
    SpawnRefused,
    SpawnRequest,
    collect_outcomes,
    spawn_child,
)
from app.tools.base import AwaitingArrival, Tool, ToolContext, ToolError

MAX_TASK_CHARS = 20_000
MAX_WAIT_IDS = 20
DEFAULT_WAIT_SECONDS = 300
MAX_WAIT_SECONDS = 3600
MAX_CHILD_TIMEOUT = 86_400
INTERRUPTED = "a new message arrived"

_UUID = {"type": "string", "format": "uuid", "pattern": "^[0-9a-fA-F-]{36}$"}


class SessionsSpawn(Tool):
    """Start a sub-agent on a task; returns its run at once."""

    name = "sessions_spawn"
    description = (
        "Start a sub-agent: a new run, in a session of its own, working on `task` (its whole "
        "instruction: it does not see this conversation). Returns at once with "
        "{childSessionKey, runId}; its final answer reaches you when it ends (sessions_wait "
        "returns it, or it arrives as a message). Optional: `agentId` (another agent of this "
        "workspace; default: yours), `label` (a short name for it), `timeoutSeconds` (it fails "
        "with run_timeout after that; default: the agent's run timeout). Its tools never "
        "exceed yours."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "task": {"type": "string", "minLength": 1, "maxLength": MAX_TASK_CHARS},
            "agentId": _UUID,
            "label": {"type": "string", "minLength": 1, "maxLength": 100},
            "timeoutSeconds": {"type": "integer", "minimum": 1, "maximum": MAX_CHILD_TIMEOUT},
        },
        "required": ["task"],
        "additionalProperties": False,
    }
    idempotent = True
    group = "sessions"

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """`{"childSessionKey", "runId"}` of the child (the same one on a re-execution)."""
        if not ctx.tool_call_id:
            raise ToolError("sessions_spawn needs a tool call id")
        settings = ctx.settings
        request = SpawnRequest(
            parent_run_id=ctx.run_id,
            tool_call_id=ctx.tool_call_id,
            task=args["task"],
            agent_id=_uuid(args.get("agentId"), "agentId"),
            label=args.get("label"),
            timeout_seconds=args.get("timeoutSeconds"),
        )
        limits = SpawnLimits(
            max_depth=settings.subagent_max_depth,
            max_children_per_run=settings.subagent_max_children_per_run,
            max_concurrent_per_tenant=settings.subagent_max_concurrent_per_tenant,
            run_timeout_seconds=int(settings.run_timeout_seconds),
        )
        try:
            async with ctx.db.tenant(ctx.principal) as s:
                spawned = await spawn_child(s, RunQueue(ctx.db), ctx.principal, request, limits)
        except SpawnRefused as exc:
            raise ToolError(exc.message) from None
        return {"childSessionKey": spawned.child_session_key, "runId": str(spawned.child_run_id)}


class SessionsWait(Tool):
    """Wait for sub-agents of this run to end; returns their outcomes."""

    name = "sessions_wait"
    description = (
        "Wait until sub-agents you spawned end, and get their outcomes: {results: [{childRunId, "
        "childSessionKey, label, status, result | error}], pending: [runId...]}. `runIds`: which "
        "ones (default: every one whose outcome you have not received yet). `timeoutSeconds` "
        f"(default {DEFAULT_WAIT_SECONDS}, at most {MAX_WAIT_SECONDS}): then it returns with "
        "the ones still running in `pending` and timedOut: true. A new message from the user "
        "also ends the wait early (interrupted)."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "runIds": {"type": "array", "items": _UUID, "maxItems": MAX_WAIT_IDS},
            "timeoutSeconds": {"type": "integer", "minimum": 1, "maximum": MAX_WAIT_SECONDS},
        },
        "additionalProperties": False,
    }
    idempotent = True
    group = "sessions"

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """The outcomes, or `AwaitingArrival` while children it waits for are running."""
        if not ctx.tool_call_id:
            raise ToolError("sessions_wait needs a tool call id")
        raw_ids = args.get("runIds")
        run_ids = None if raw_ids is None else [_uuid_required(r) for r in raw_ids]
        try:
            async with ctx.db.tenant(ctx.principal) as s:
                progress = await collect_outcomes(
                    s,
                    run_id=ctx.run_id,
                    tool_call_id=ctx.tool_call_id,
                    run_ids=run_ids,
                    timeout_seconds=args.get("timeoutSeconds", DEFAULT_WAIT_SECONDS),
                )
        except SpawnRefused as exc:
            raise ToolError(exc.message) from None
        answer: dict[str, Any] = {
            "results": progress.results,
            "pending": [str(p) for p in progress.pending],
        }
        if not progress.pending:
            return answer
        if progress.timed_out:
            return {**answer, "timedOut": True}
        if progress.steer_waiting:
            return {**answer, "interrupted": INTERRUPTED}
        raise AwaitingArrival(progress.pending, wake_at=progress.deadline)


def _uuid(value: Any, field: str) -> UUID | None:
    if value is None:
        return None
    try:
        return UUID(str(value))
    except ValueError:
        raise ToolError(f"{field}: not a UUID: {value!r}") from None


def _uuid_required(value: Any) -> UUID:
    found = _uuid(value, "runIds")
    assert found is not None
    return found


def subagent_tools() -> list[Tool]:
    """One instance of each sub-agent tool."""
    return [SessionsSpawn(), SessionsWait()]
