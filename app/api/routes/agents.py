"""Agents: create, list, read, change and delete the tenant's agent configurations (changes:
owners and admins only, each with its audit event).

The tenant's default agent (used by runs posted without `agentId`) is created with the server
defaults on the tenant's first run, or by the first `GET /agents`, so it can be configured before
any run. Names are unique per tenant (409). Another tenant's agent is 404, like any unknown id.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Path, Response
from sqlalchemy.exc import IntegrityError

from app.agents import store as agent_store
from app.api.agent_schemas import AgentCreate, AgentList, AgentOut, AgentUpdate
from app.api.deps import AdminPrincipal, CurrentPrincipal, DatabaseDep, JsonBody, SettingsDep
from app.api.errors import ApiError
from app.api.schemas import error_responses
from app.audit.record import record_audit
from app.db.models import Agent
from app.runtime.agent_settings import AgentSettings, merge_settings

router = APIRouter(prefix="/api/agent-runtime/agents", tags=["agents"])

NAME_CONSTRAINT = "agents_tenant_name_key"
AgentIdPath = Annotated[UUID, Path(alias="agentId", description="The agent's id.")]
_SETTINGS_FIELDS = (
    "mode",
    "timeout_seconds",
    "token_budget",
    "context_window",
    "if_busy",
    "max_spawn_depth",
    "max_children_per_run",
    "max_exchanges",
    "fallback_models",
)
_COLUMN_FIELDS = ("name", "model", "system_prompt", "max_turns")


def readable_settings(stored: dict[str, Any] | None) -> AgentSettings:
    """The stored settings, or the defaults where they cannot be read (edited by hand)."""
    try:
        return AgentSettings.of(stored)
    except ValueError:
        return AgentSettings()


def agent_out(agent: Agent) -> AgentOut:
    """An `agents` row as the API shows it."""
    extra = readable_settings(agent.settings)
    return AgentOut(
        id=agent.id,
        name=agent.name,
        model=agent.model,
        system_prompt=agent.system_prompt,
        max_turns=agent.max_turns,
        mode=extra.mode,
        timeout_seconds=extra.timeout_seconds,
        token_budget=extra.token_budget,
        context_window=extra.context_window,
        if_busy=extra.if_busy,
        max_spawn_depth=extra.max_spawn_depth,
        max_children_per_run=extra.max_children_per_run,
        max_exchanges=extra.max_exchanges,
        fallback_models=list(extra.fallback_models),
        is_default=agent.is_default,
        owner_user_id=agent.owner_user_id,
        created_at=agent.created_at,
        updated_at=agent.updated_at,
    )


def audited(out: AgentOut) -> dict[str, Any]:
    """An agent as its audit events record it (the API's JSON view, without timestamps)."""
    return out.model_dump(mode="json", by_alias=True, exclude={"created_at", "updated_at"})


def _not_found(agent_id: UUID) -> ApiError:
    return ApiError(404, f"agent {agent_id} not found", field="agentId")


def _conflict(exc: IntegrityError, name: str | None) -> ApiError:
    if NAME_CONSTRAINT in str(exc.orig):
        return ApiError(409, f"an agent named {name!r} already exists", field="name")
    raise exc


@router.post(
    "",
    status_code=201,
    response_model=AgentOut,
    responses=error_responses(400, 401, 403, 409, 413, 415, 422),
)
async def create_agent(
    principal: AdminPrincipal,
    db: DatabaseDep,
    settings: SettingsDep,
    _json: JsonBody,
    body: AgentCreate,
) -> AgentOut:
    """Create an agent owned by the caller (omitted fields: the server defaults). Tenant
    owners and admins only (403 `forbidden_role`)."""
    extra = AgentSettings.model_validate({name: getattr(body, name) for name in _SETTINGS_FIELDS})
    try:
        async with db.tenant(principal) as s:
            agent = await agent_store.insert_agent(
                s,
                principal,
                name=body.name,
                model=body.model or settings.default_model,
                system_prompt=body.system_prompt or "",
                max_turns=body.max_turns or min(settings.max_turns, 100),
                settings=extra.dump(),
            )
            out = agent_out(agent)
            await record_audit(
                s,
                principal,
                "agent.created",
                target_type="agent",
                target_id=str(agent.id),
                after=audited(out),
            )
    except IntegrityError as exc:
        raise _conflict(exc, body.name) from None
    return out


@router.get("", response_model=AgentList, responses=error_responses(401))
async def list_agents(
    principal: CurrentPrincipal, db: DatabaseDep, settings: SettingsDep
) -> AgentList:
    """The tenant's agents, the default agent first (created now if the tenant has none yet)."""
    async with db.tenant(principal) as s:
        await agent_store.default_agent(
            s, principal, model=settings.default_model, max_turns=min(settings.max_turns, 100)
        )
        return AgentList(agents=[agent_out(a) for a in await agent_store.list_agents(s)])


@router.get("/{agentId}", response_model=AgentOut, responses=error_responses(401, 404, 422))
async def get_agent(
    principal: CurrentPrincipal, db: DatabaseDep, agent_id: AgentIdPath
) -> AgentOut:
    """One agent of the tenant."""
    async with db.tenant(principal) as s:
        agent = await agent_store.get_agent(s, agent_id)
        if agent is None:
            raise _not_found(agent_id)
        return agent_out(agent)


@router.patch(
    "/{agentId}",
    response_model=AgentOut,
    responses=error_responses(400, 401, 403, 404, 409, 413, 415, 422),
)
async def update_agent(
    principal: AdminPrincipal,
    db: DatabaseDep,
    _json: JsonBody,
    agent_id: AgentIdPath,
    body: AgentUpdate,
) -> AgentOut:
    """Change an agent; runs already started keep the settings they began with, except that a
    resumed attempt reads the agent again. Tenant owners and admins only (403 `forbidden_role`)."""
    changes = body.changes()
    try:
        async with db.tenant(principal) as s:
            agent = await agent_store.lock_agent(s, agent_id)
            if agent is None:
                raise _not_found(agent_id)
            values: dict[str, Any] = {k: v for k, v in changes.items() if k in _COLUMN_FIELDS}
            if any(k in changes for k in _SETTINGS_FIELDS):
                current = readable_settings(agent.settings).model_dump()
                updated = AgentSettings.model_validate(
                    {**current, **{k: v for k, v in changes.items() if k in _SETTINGS_FIELDS}}
                )
                values["settings"] = merge_settings(agent.settings, updated)
            before = agent_out(agent)
            if not values:
                return before
            agent = await agent_store.update_agent(s, agent, values)
            after = agent_out(agent)
            await record_audit(
                s,
                principal,
                "agent.updated",
                target_type="agent",
                target_id=str(agent.id),
                before=audited(before),
                after=audited(after),
            )
            return after
    except IntegrityError as exc:
        raise _conflict(exc, changes.get("name")) from None


@router.delete(
    "/{agentId}",
    status_code=204,
    response_class=Response,
    responses=error_responses(401, 403, 404, 409, 422),
)
async def delete_agent(
    principal: AdminPrincipal, db: DatabaseDep, agent_id: AgentIdPath
) -> Response:
    """Delete an agent that no session uses (its tool policy and memory go with it); 409 for the
    default agent or one with sessions (they keep their history). Owners and admins only."""
    try:
        async with db.tenant(principal) as s:
            agent = await agent_store.lock_agent(s, agent_id)
            if agent is None:
                raise _not_found(agent_id)
            if agent.is_default:
                raise ApiError(
                    409,
                    "the default agent cannot be deleted (runs without agentId use it)",
                    field="agentId",
                )
            before = audited(agent_out(agent))
            await agent_store.delete_agent(s, agent_id)
            await record_audit(
                s,
                principal,
                "agent.deleted",
                target_type="agent",
                target_id=str(agent_id),
                before=before,
            )
    except IntegrityError:
        raise ApiError(
            409,
            f"agent {agent_id} is used by sessions or runs, which keep their history; "
            "it cannot be deleted",
            field="agentId",
        ) from None
    return Response(status_code=204)
