"""A tenant's own model provider keys (admins only): list, store or replace, remove.

Runs of the tenant use a stored key instead of the deployment's for that provider
(`app/runtime/tenant_models.py`). Keys are encrypted at rest and never returned; see
docs/provider-keys.md.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from app.api.deps import AdminPrincipal, DatabaseDep, JsonBody, SettingsDep
from app.api.errors import ApiError
from app.api.provider_key_schemas import ProviderKeyBody, ProviderKeyInfo, ProviderKeyList
from app.api.schemas import error_responses
from app.api.secret_routes import (
    ADMIN_ONLY,
    NO_SECRETS_KEY,
    sealing_keyring,
)
from app.runtime.provider_endpoints import EndpointRefusedError, check_endpoint
from app.tenants import provider_keys as store

router = APIRouter(prefix="/api/agent-runtime", tags=["provider keys"])

ProviderPath = Annotated[
    store.Provider, Path(description="`gemini` (gemini-* models) or `openai` (openai:<model>).")
]


def info(stored: store.ProviderKeyInfo) -> ProviderKeyInfo:
    """The API view of a stored key."""
    return ProviderKeyInfo(
        provider=stored.provider,
        last4=stored.last4,
        base_url=stored.base_url,
        key_id=stored.key_id,
        updated_at=stored.updated_at,
    )


@router.get(
    "/provider-keys", response_model=ProviderKeyList, responses=error_responses(401) | ADMIN_ONLY
)
async def list_provider_keys(principal: AdminPrincipal, db: DatabaseDep) -> ProviderKeyList:
    """The tenant's stored provider keys (last 4 characters only)."""
    async with db.tenant(principal) as s:
        return ProviderKeyList(keys=[info(k) for k in await store.list_keys(s)])


@router.put(
    "/provider-keys/{provider}",
    response_model=ProviderKeyInfo,
    responses=error_responses(400, 401, 415, 422) | ADMIN_ONLY | NO_SECRETS_KEY,
)
async def put_provider_key(
    principal: AdminPrincipal,
    db: DatabaseDep,
    settings: SettingsDep,
    _json: JsonBody,
    provider: ProviderPath,
    body: ProviderKeyBody,
) -> ProviderKeyInfo:
    """Store (or replace) the tenant's key and endpoint for `provider`.

    503 `secrets_key_missing` when the deployment has no SECRETS_KEY to encrypt it with.
    """
    keyring = sealing_keyring(settings, "provider keys")
    base_url = body.base_url
    if base_url is not None:
        try:
            base_url = await check_endpoint(base_url, settings)
        except EndpointRefusedError as exc:
            raise ApiError(422, f"baseUrl is refused: {exc}", field="baseUrl") from None
    async with db.tenant(principal) as s:
        stored = await store.put_key(s, principal, keyring, provider, body.api_key, base_url)
    return info(stored)


@router.delete(
    "/provider-keys/{provider}", status_code=204, responses=error_responses(401, 404) | ADMIN_ONLY
)
async def delete_provider_key(
    principal: AdminPrincipal, db: DatabaseDep, provider: ProviderPath
) -> Response:
    """Remove the tenant's key for `provider` (its runs use the deployment's again)."""
    async with db.tenant(principal) as s:
        if not await store.delete_key(s, principal, provider):
            raise ApiError(404, f"no {provider} key is stored", field="provider")
    return Response(status_code=204)
