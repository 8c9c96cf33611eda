"""Sub-agents: the tree of runs a run spawned (`sessions_spawn`), with their outcomes."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Path

from app.api.deps import CurrentPrincipal, DatabaseDep
from app.api.routes.runs import error_of, result_of, run_not_found
from app.api.schemas import error_responses
from app.api.subagent_schemas import ChildRun, RunChildren
from app.queue import event_log
from app.queue.subagents import ChildNode, child_tree

router = APIRouter(prefix="/api/agent-runtime", tags=["runs"])


@router.get(
    "/runs/{runId}/children", response_model=RunChildren, responses=error_responses(401, 404, 422)
)
async def run_children(
    principal: CurrentPrincipal,
    db: DatabaseDep,
    run_id: Annotated[UUID, Path(alias="runId", description="The run's id.")],
) -> RunChildren:
    """The sub-agents a run spawned and theirs, with statuses and outcomes."""
    async with db.tenant(principal) as s:
        if await event_log.run_status(s, run_id) is None:
            raise run_not_found(run_id)
        tree = await child_tree(s, run_id)
    return RunChildren(run_id=run_id, children=[_child(n) for n in tree])


def _child(node: ChildNode) -> ChildRun:
    result: dict[str, Any] | None = node.result if node.status == "completed" else None
    return ChildRun(
        run_id=node.run_id,
        session_key=node.session_key,
        label=node.label,
        task=node.task,
        status=node.status,
        agent_id=node.agent_id,
        result=result_of(result),
        error=None if node.status == "completed" else error_of(node.error),
        created_at=node.created_at,
        finished_at=node.finished_at,
        children=[_child(c) for c in node.children],
    )
