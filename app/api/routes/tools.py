"""Tools: what an agent may use and why (`/tools`), and a run's tool calls (`/runs/{runId}/tools`)."""

from __future__ import annotations

from typing import Annotated, Any, cast
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Query, Request

from app.agents.store import find_default_agent, get_agent
from app.api.deps import CurrentPrincipal, DatabaseDep, SettingsDep
from app.api.errors import ApiError
from app.api.routes.runs import run_not_found
from app.api.schemas import error_responses
from app.api.tool_schemas import (
    RuleInfo,
    ToolExecutionInfo,
    ToolExecutionPage,
    ToolInfo,
    ToolsPage,
    UnavailableInfo,
)
from app.db.models import ToolExecution
from app.queue.event_log import run_status
from app.runtime.tool_records import executions_of
from app.tools.base import Tool
from app.tools.catalog import default_tool_sources
from app.tools.policy import EffectivePolicy
from app.tools.policy_store import resolve_policy
from app.tools.registry import ToolRegistry, default_tool_registry, run_catalog
from app.tools.sources import ToolSources

router = APIRouter(prefix="/api/agent-runtime", tags=["tools"])


def get_tool_catalog(request: Request, settings: SettingsDep) -> ToolRegistry:
    """Every tool of the deployment (built once per app; tests may set `app.state.tool_catalog`)."""
    catalog = getattr(request.app.state, "tool_catalog", None)
    if not isinstance(catalog, ToolRegistry):
        catalog = default_tool_registry(settings)
        request.app.state.tool_catalog = catalog
    return catalog


CatalogDep = Annotated[ToolRegistry, Depends(get_tool_catalog)]


def get_tool_sources(request: Request, settings: SettingsDep) -> ToolSources:
    """The tenants' tool sources (built once per app, closed with it; tests may set
    `app.state.tool_sources`)."""
    sources = getattr(request.app.state, "tool_sources", None)
    if not isinstance(sources, ToolSources):
        sources = default_tool_sources(settings)
        request.app.state.tool_sources = sources
    return sources


SourcesDep = Annotated[ToolSources, Depends(get_tool_sources)]


def tool_info(tool: Tool, policy: EffectivePolicy) -> ToolInfo:
    """A tool with the policy's verdict and approval rule."""
    verdict = policy.evaluate(tool)
    return ToolInfo(
        name=tool.name,
        description=tool.description,
        group=tool.group,
        risk=tool.risk,
        owner_only=tool.owner_only,
        source=tool.origin,
        idempotent=tool.idempotent,
        parameters=tool.parameters,
        allowed=verdict.allowed,
        reason=verdict.reason,
        rule=RuleInfo(
            kind=verdict.kind, scope=verdict.scope, pattern=verdict.pattern, profile=verdict.profile
        ),
        approval=policy.approval_rule(tool) if verdict.allowed else None,
    )


@router.get("/tools", response_model=ToolsPage, responses=error_responses(401, 404, 422))
async def list_tools(
    principal: CurrentPrincipal,
    db: DatabaseDep,
    catalog: CatalogDep,
    sources: SourcesDep,
    agent_id: Annotated[
        UUID | None,
        Query(alias="agentId", description="The agent (default: the tenant's default agent)."),
    ] = None,
) -> ToolsPage:
    """What the agent may use in the caller's runs and why; what is denied and why; which of
    the tenant's tools (MCP servers, HTTP tools) are unavailable now and why."""
    async with db.tenant(principal) as s:
        if agent_id is not None:
            agent = await get_agent(s, agent_id)
            if agent is None:
                raise ApiError(404, f"agent {agent_id} not found", field="agentId")
        else:
            agent = await find_default_agent(s)
        policy = await resolve_policy(s, agent=agent, user_id=principal.user_id)
    sourced = await sources.tools_for(db, principal, None if agent is None else agent.id)
    tools = run_catalog(catalog, sourced)
    infos = [tool_info(t, policy) for t in tools.tools()]
    profile, source = policy.profile
    per_turn, per_run = policy.max_calls_per_turn, policy.max_calls_per_run
    return ToolsPage(
        agent_id=None if agent is None else agent.id,
        profile=profile,
        profile_source=source,
        owner=policy.is_owner,
        max_calls_per_turn=None if per_turn is None else per_turn.limit,
        max_calls_per_run=None if per_run is None else per_run.limit,
        allowed=[i for i in infos if i.allowed],
        denied=[i for i in infos if not i.allowed],
        unavailable=[
            UnavailableInfo(source=u.source, tools=u.pattern, reason=u.reason)
            for u in tools.unavailable
        ],
    )


@router.get(
    "/runs/{runId}/tools", response_model=ToolExecutionPage, responses=error_responses(401, 404)
)
async def run_tools(
    principal: CurrentPrincipal,
    db: DatabaseDep,
    run_id: Annotated[UUID, Path(alias="runId", description="The run's id.")],
) -> ToolExecutionPage:
    """A run's tool calls: arguments, status, result or error, timings, attempts, approval."""
    async with db.tenant(principal) as s:
        if await run_status(s, run_id) is None:
            raise run_not_found(run_id)
        rows = await executions_of(s, run_id)
    return ToolExecutionPage(
        run_id=run_id,
        executions=[execution_info(row[0], row[1], row[2]) for row in rows],
    )


def execution_info(
    row: ToolExecution, approval_status: str | None, decided_by: str | None
) -> ToolExecutionInfo:
    """The API view of a `tool_executions` row."""
    duration = None
    if row.finished_at is not None:
        duration = max(0, round((row.finished_at - row.started_at).total_seconds() * 1000))
    return ToolExecutionInfo(
        id=row.id,
        tool_call_id=row.tool_call_id,
        name=row.name,
        args=row.args,
        status=cast(Any, row.status),
        result=row.result,
        error=row.error,
        started_at=row.started_at,
        finished_at=row.finished_at,
        duration_ms=duration,
        attempt=row.attempt,
        worker_id=row.worker_id,
        approval_id=row.approval_id,
        approval_status=approval_status,
        decided_by=decided_by,
    )
