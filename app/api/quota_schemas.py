"""Bodies of the quota routes: `GET/PUT /quotas` (admins) and `GET /usage` (every member)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import ConfigDict, Field

from app.api.schemas import ApiModel

_MAX = 2**31 - 1
_MAX_TOKENS = 2**63 - 1


class QuotaOverrides(ApiModel):
    """A tenant's overrides of the deployment's limits: a non-negative integer (0 = unlimited)
    or null (the deployment's default, `QUOTA_*`). A field left out of a PUT is null."""

    model_config = ConfigDict(extra="forbid")

    runs_per_minute: int | None = Field(default=None, ge=0, le=_MAX, strict=True)
    active_runs: int | None = Field(default=None, ge=0, le=_MAX, strict=True)
    queued_runs: int | None = Field(default=None, ge=0, le=_MAX, strict=True)
    tokens_per_day: int | None = Field(default=None, ge=0, le=_MAX_TOKENS, strict=True)


class LimitInfo(ApiModel):
    """One limit in force."""

    value: int = Field(description="0: unlimited.")
    source: Literal["default", "tenant"] = Field(
        description="`tenant`: the tenant's override; `default`: the deployment's `QUOTA_*`."
    )


class EffectiveLimits(ApiModel):
    """The tenant's limits in force."""

    runs_per_minute: LimitInfo
    active_runs: LimitInfo
    queued_runs: LimitInfo
    tokens_per_day: LimitInfo


class QuotasView(ApiModel):
    """`GET/PUT /quotas`: the tenant's overrides and the limits they put in force."""

    overrides: QuotaOverrides
    limits: EffectiveLimits


class CurrentUsage(ApiModel):
    """What counts against the limits now."""

    runs_last_minute: int
    active_runs: int
    queued_runs: int
    tokens_today: int = Field(description="Model tokens (input + output) in the current UTC day.")
    resets_at: datetime = Field(description="When `tokensToday` starts again at 0 (UTC midnight).")


class UsageView(ApiModel):
    """`GET /usage`: the tenant's limits in force and its current usage."""

    limits: EffectiveLimits
    usage: CurrentUsage
