"""A tenant's HTTP tools (admins only): list, read, define or replace, remove, rotate a secret.

Runs of the tenant (of the tool's agent, when it names one) get them as tools
(`app/tools/http/`); each call is signed with the tool's secret, shown only when it is made. See
docs/tools.md, "Tenant HTTP tools".
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError

from app.agents.store import get_agent
from app.api.deps import AdminPrincipal, DatabaseDep, JsonBody, SettingsDep
from app.api.errors import ApiError
from app.api.http_tool_schemas import (
    HeaderInfo,
    HttpToolBody,
    HttpToolInfo,
    HttpToolList,
    HttpToolWithSecret,
)
from app.api.routes.tools import CatalogDep
from app.api.schemas import error_responses
from app.api.secret_routes import (
    ADMIN_ONLY,
    NO_SECRETS_KEY,
    sealing_keyring,
)
from app.config import Settings
from app.tenants.crypto import Keyring
from app.tools.base import ToolError
from app.tools.http import store
from app.tools.http.definition import NAME_PATTERN, HttpToolDefinition, name_problem
from app.tools.web.ssrf import AddressPolicy, check_url

router = APIRouter(prefix="/api/agent-runtime", tags=["http tools"])

NamePath = Annotated[str, Path(pattern=NAME_PATTERN, max_length=64, description="The tool's name.")]


def info(stored: store.HttpToolInfo) -> HttpToolInfo:
    """The API view of a stored tool."""
    return HttpToolInfo(
        name=stored.name,
        agent_id=stored.agent_id,
        description=stored.description,
        parameters=stored.parameters,
        url=stored.url,
        method=stored.method,
        headers=[HeaderInfo(name=n, last4=last4) for n, last4 in sorted(stored.headers.items())],
        timeout_seconds=stored.timeout_seconds,
        risk=stored.risk,
        secret_rotated_at=stored.secret_rotated_at,
        created_at=stored.created_at,
        updated_at=stored.updated_at,
    )


def with_secret(stored: store.HttpToolInfo, secret: str) -> HttpToolWithSecret:
    """The API view of a tool with its new signing secret."""
    return HttpToolWithSecret(**info(stored).model_dump(), signing_secret=secret)


def _not_found(name: str) -> ApiError:
    return ApiError(404, f"no HTTP tool named {name!r}", field="name")


def _keyring(settings: Settings) -> Keyring:
    return sealing_keyring(settings, "HTTP tools' secrets")


@router.get("/http-tools", response_model=HttpToolList, responses=error_responses(401) | ADMIN_ONLY)
async def list_http_tools(principal: AdminPrincipal, db: DatabaseDep) -> HttpToolList:
    """The tenant's HTTP tools (header names only, never values or secrets)."""
    async with db.tenant(principal) as s:
        return HttpToolList(tools=[info(t) for t in await store.list_tools(s)])


@router.get(
    "/http-tools/{name}",
    response_model=HttpToolInfo,
    responses=error_responses(401, 404, 422) | ADMIN_ONLY,
)
async def get_http_tool(principal: AdminPrincipal, db: DatabaseDep, name: NamePath) -> HttpToolInfo:
    """One of the tenant's HTTP tools."""
    async with db.tenant(principal) as s:
        stored = await store.get_tool(s, name)
    if stored is None:
        raise _not_found(name)
    return info(stored)


@router.put(
    "/http-tools/{name}",
    response_model=HttpToolInfo,
    responses={
        201: {"model": HttpToolWithSecret, "description": "Created: with its signing secret."}
    }
    | error_responses(400, 401, 409, 415, 422)
    | ADMIN_ONLY
    | NO_SECRETS_KEY,
)
async def put_http_tool(
    principal: AdminPrincipal,
    db: DatabaseDep,
    settings: SettingsDep,
    catalog: CatalogDep,
    _json: JsonBody,
    name: NamePath,
    body: HttpToolBody,
) -> HttpToolInfo | JSONResponse:
    """Define (201, with the signing secret, shown only now) or replace (200) the tool `name`.

    409 `tool_name_taken` when a built-in tool has the name; 422 for a parameters schema that
    is not valid, a refused URL or an unknown agent.
    """
    taken = catalog.names()
    if (problem := name_problem(name, taken)) is not None:
        if name in taken:
            raise ApiError(409, problem, code="tool_name_taken", field="name")
        raise ApiError(422, problem, field="name")
    try:
        check_url(body.url, AddressPolicy.from_settings(settings))
    except ToolError as exc:
        raise ApiError(422, f"url: {exc.message}", field="url") from None
    keyring = _keyring(settings)
    definition = HttpToolDefinition(
        name=name,
        description=body.description,
        url=body.url,
        method=body.method,
        parameters=body.parameters,
        timeout_seconds=body.timeout_seconds,
        risk=body.risk,
        agent_id=body.agent_id,
        headers=body.headers,
    )
    try:
        async with db.tenant(principal) as s:
            if body.agent_id is not None and await get_agent(s, body.agent_id) is None:
                raise ApiError(422, f"agent {body.agent_id} not found", field="agentId")
            stored, secret = await store.put_tool(s, principal, keyring, definition)
    except IntegrityError:
        raise ApiError(
            409,
            f"the tool {name!r} was changed by another request at the same time (or its agent "
            "was deleted); try again",
            field="name",
        ) from None
    if secret is None:
        return info(stored)
    created = with_secret(stored, secret).model_dump(mode="json", by_alias=True)
    return JSONResponse(created, status_code=201)


@router.post(
    "/http-tools/{name}/rotate-secret",
    response_model=HttpToolWithSecret,
    responses=error_responses(401, 404, 422) | ADMIN_ONLY | NO_SECRETS_KEY,
)
async def rotate_http_tool_secret(
    principal: AdminPrincipal, db: DatabaseDep, settings: SettingsDep, name: NamePath
) -> HttpToolWithSecret:
    """A new signing secret for the tool (shown only now); calls are signed with it at once."""
    keyring = _keyring(settings)
    async with db.tenant(principal) as s:
        rotated = await store.rotate_secret(s, principal, keyring, name)
    if rotated is None:
        raise _not_found(name)
    return with_secret(*rotated)


@router.delete(
    "/http-tools/{name}", status_code=204, responses=error_responses(401, 404, 422) | ADMIN_ONLY
)
async def delete_http_tool(principal: AdminPrincipal, db: DatabaseDep, name: NamePath) -> Response:
    """Remove the tool (runs that start afterwards no longer get it)."""
    async with db.tenant(principal) as s:
        if not await store.delete_tool(s, principal, name):
            raise _not_found(name)
    return Response(status_code=204)
