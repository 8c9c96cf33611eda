"""Quotas: the tenant's limits and usage (`GET /usage`, every member) and its overrides of the
deployment's defaults (`GET/PUT /quotas`, admins; changes are audited as `quota.updated`)."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import AdminPrincipal, CurrentPrincipal, DatabaseDep, SettingsDep
from app.api.quota_schemas import (
    CurrentUsage,
    EffectiveLimits,
    LimitInfo,
    QuotaOverrides,
    QuotasView,
    UsageView,
)
from app.api.schemas import error_responses
from app.audit.record import record_audit
from app.tenants import quotas as q

router = APIRouter(prefix="/api/agent-runtime", tags=["quotas"])


def _limits(limits: q.Limits) -> EffectiveLimits:
    info = {
        name: LimitInfo(value=lim.value, source=lim.source) for name, lim in limits.by_name.items()
    }
    return EffectiveLimits.model_validate(info)


def _overrides(values: q.Overrides) -> QuotaOverrides:
    return QuotaOverrides.model_validate(values)


def _as_json(values: q.Overrides) -> dict[str, int | None]:
    return {name: values[name] for name in q.LIMIT_NAMES}


@router.get("/usage", response_model=UsageView, responses=error_responses(401))
async def usage(principal: CurrentPrincipal, db: DatabaseDep, settings: SettingsDep) -> UsageView:
    """The tenant's limits in force (and where each comes from) and its current usage."""
    defaults = q.QuotaDefaults.from_settings(settings)
    async with db.tenant(principal) as s:
        limits = await q.limits_of(s, defaults)
        now = await q.counts(s, principal)
    return UsageView(
        limits=_limits(limits),
        usage=CurrentUsage(
            runs_last_minute=now.runs_last_minute,
            active_runs=now.active,
            queued_runs=now.queued,
            tokens_today=now.tokens_today,
            resets_at=q.next_utc_midnight(now.now),
        ),
    )


@router.get("/quotas", response_model=QuotasView, responses=error_responses(401, 403))
async def get_quotas(
    principal: AdminPrincipal, db: DatabaseDep, settings: SettingsDep
) -> QuotasView:
    """The tenant's overrides (null: the deployment's default) and the limits in force."""
    async with db.tenant(principal) as s:
        own = await q.overrides(s)
    return QuotasView(
        overrides=_overrides(own),
        limits=_limits(q.effective(q.QuotaDefaults.from_settings(settings), own)),
    )


@router.put("/quotas", response_model=QuotasView, responses=error_responses(400, 401, 403, 422))
async def put_quotas(
    principal: AdminPrincipal, db: DatabaseDep, settings: SettingsDep, body: QuotaOverrides
) -> QuotasView:
    """Replace the tenant's overrides: each limit a non-negative integer (0 = unlimited) or null
    (the deployment's default). Audited as `quota.updated` with before and after."""
    after: q.Overrides = {
        "runsPerMinute": body.runs_per_minute,
        "activeRuns": body.active_runs,
        "queuedRuns": body.queued_runs,
        "tokensPerDay": body.tokens_per_day,
    }
    async with db.tenant(principal) as s:
        before = await q.overrides(s)
        await q.set_overrides(s, principal.tenant_id, principal.user_id, after)
        await record_audit(
            s,
            principal,
            "quota.updated",
            target_type="quota",
            target_id=principal.tenant_id,
            before=_as_json(before),
            after=_as_json(after),
        )
    return QuotasView(
        overrides=_overrides(after),
        limits=_limits(q.effective(q.QuotaDefaults.from_settings(settings), after)),
    )
