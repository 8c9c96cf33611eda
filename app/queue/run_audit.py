"""The audit events of the run lifecycle and of tool executions (`app.audit.record`), each
written in the transaction that makes the change: `run.created`, `run.steered`, `run.collected`,
`run.cancelled`, `run.failed`, `tool.executed`.

Messages and tool arguments are not copied into the trail: a message is recorded by its length
and sha256, a tool call's arguments by the sha256 of their canonical JSON.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncSession

from app.audit.digest import args_digest, message_facts
from app.audit.record import record_audit
from app.auth.principal import Principal


async def run_posted(
    s: AsyncSession,
    principal: Principal,
    action: str,
    run_id: UUID,
    *,
    agent_id: UUID,
    session_key: str,
    if_busy: str | None,
    message: str,
    parent_run_id: UUID | None = None,
) -> None:
    """`run.created` (a new run), `run.steered` or `run.collected` (a message into a live run)."""
    after: dict[str, Any] = {
        "agentId": str(agent_id),
        "sessionKey": session_key,
        "ifBusy": if_busy,
        **message_facts(message),
    }
    if parent_run_id is not None:
        after["parentRunId"] = str(parent_run_id)
    await record_audit(s, principal, action, target_type="run", target_id=str(run_id), after=after)


async def run_cancelled(
    s: AsyncSession,
    principal: Principal,
    run_id: UUID,
    *,
    stopping: bool,
    reason: str,
    by_run_id: UUID | None = None,
) -> None:
    """`run.cancelled`: an idle run cancelled on the spot, or (`stopping`) a running one asked to
    stop (its worker finishes it `cancelled` within seconds)."""
    after: dict[str, Any] = {"status": "stopping" if stopping else "cancelled", "reason": reason}
    if by_run_id is not None:
        after["byRunId"] = str(by_run_id)
    await record_audit(
        s, principal, "run.cancelled", target_type="run", target_id=str(run_id), after=after
    )


async def run_failed(
    s: AsyncSession, principal: Principal, run_id: UUID, error: dict[str, Any] | None
) -> None:
    """`run.failed`, with the run's error code and message."""
    error = error or {}
    after = {
        "status": "failed",
        "error": {"code": error.get("code"), "message": error.get("message")},
    }
    await record_audit(
        s, principal, "run.failed", target_type="run", target_id=str(run_id), after=after
    )


async def tool_executed(
    s: AsyncSession,
    principal: Principal,
    *,
    run_id: UUID,
    execution_id: UUID | None,
    tool_call_id: str,
    name: str,
    args: Any,
    outcome: str,
    duration_ms: float | None,
    refused: bool = False,
) -> None:
    """`tool.executed`: a call's outcome (`completed`, `failed`, `interrupted`) as stored in its
    `tool_executions` row; `refused`: it was not run (policy, cap, denied approval)."""
    after: dict[str, Any] = {
        "runId": str(run_id),
        "toolName": name,
        "toolCallId": tool_call_id,
        "argsSha256": args_digest(args),
        "outcome": outcome,
        "durationMs": None if duration_ms is None else round(duration_ms, 3),
    }
    if refused:
        after["refused"] = True
    await record_audit(
        s,
        principal,
        "tool.executed",
        target_type="tool_execution",
        target_id=None if execution_id is None else str(execution_id),
        after=after,
    )
