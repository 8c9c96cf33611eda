"""A tenant's quotas: the limits in force (settings, overridden per tenant in `tenant_quotas`),
what counts against them, and the admission check a new run passes in its enqueue transaction.

Four limits, each 0 = unlimited:

* `runsPerMinute`: runs created in the last 60 seconds (all of the tenant's runs);
* `activeRuns`: runs running or parked (`running`, `awaiting_approval`, `waiting`);
* `queuedRuns`: runs waiting to be claimed (`queued`);
* `tokensPerDay`: model tokens (input + output) in the current UTC day (`tenant_usage_daily`).

A refused post raises `QuotaExceededError` (429 `quota_exceeded` with `Retry-After`). The
counting limits are checked under a per-tenant transaction-scoped advisory lock, so concurrent
posts of one tenant are admitted one after another and cannot overshoot together; a tenant with
none of them set takes no lock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Literal

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.principal import Principal
from app.config import Settings
from app.core.errors import QuotaExceededError
from app.db.engine import acting_as
from app.db.models import TenantQuota, TenantUsageDaily

LimitName = Literal["runsPerMinute", "activeRuns", "queuedRuns", "tokensPerDay"]
LIMIT_NAMES: tuple[LimitName, ...] = ("runsPerMinute", "activeRuns", "queuedRuns", "tokensPerDay")
_COLUMNS: dict[LimitName, str] = {
    "runsPerMinute": "runs_per_minute",
    "activeRuns": "active_runs",
    "queuedRuns": "queued_runs",
    "tokensPerDay": "tokens_per_day",
}
ACTIVE_STATUSES = ("running", "awaiting_approval", "waiting")
BUSY_RETRY_SECONDS = 5
"""`Retry-After` of a refusal over `activeRuns`/`queuedRuns`: runs end at their own pace; a few
seconds is a polite polling interval."""
_LOCK_CLASS = 140014
"""First key of the advisory lock (`pg_advisory_xact_lock(int, int)`): this module's namespace."""


@dataclass(frozen=True, slots=True)
class QuotaDefaults:
    """The deployment's limits (`QUOTA_*` settings); 0 = unlimited."""

    runs_per_minute: int = 0
    active_runs: int = 0
    queued_runs: int = 0
    tokens_per_day: int = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> QuotaDefaults:
        """The defaults of these settings."""
        return cls(
            runs_per_minute=settings.quota_runs_per_minute,
            active_runs=settings.quota_active_runs,
            queued_runs=settings.quota_queued_runs,
            tokens_per_day=settings.quota_tokens_per_day,
        )

    def value(self, name: LimitName) -> int:
        """The default of limit `name`."""
        return int(getattr(self, _COLUMNS[name]))


@dataclass(frozen=True, slots=True)
class Limit:
    """One limit in force: its value (0 = unlimited) and where it comes from."""

    value: int
    source: Literal["default", "tenant"]


@dataclass(frozen=True, slots=True)
class Limits:
    """The tenant's limits in force, by name."""

    by_name: dict[LimitName, Limit]

    def __getitem__(self, name: LimitName) -> int:
        return self.by_name[name].value


@dataclass(frozen=True, slots=True)
class Counts:
    """What counts against the limits now."""

    runs_last_minute: int
    oldest_in_minute: datetime | None
    active: int
    queued: int
    tokens_today: int
    now: datetime


Overrides = dict[LimitName, int | None]
"""A tenant's overrides: a value per limit, None = the deployment's default."""


async def overrides(s: AsyncSession) -> Overrides:
    """The tenant's overrides (RLS: the transaction's tenant), every limit None if it has none."""
    row = await s.scalar(select(TenantQuota))
    return {name: None if row is None else getattr(row, _COLUMNS[name]) for name in LIMIT_NAMES}


async def set_overrides(s: AsyncSession, tenant_id: str, user_id: str, values: Overrides) -> None:
    """Store the tenant's overrides (an admin's transaction: RLS refuses anyone else)."""
    columns = {_COLUMNS[name]: values[name] for name in LIMIT_NAMES}
    await s.execute(
        text(
            "INSERT INTO tenant_quotas (tenant_id, runs_per_minute, active_runs, queued_runs, "
            "tokens_per_day, updated_by) VALUES (:tenant_id, :runs_per_minute, :active_runs, "
            ":queued_runs, :tokens_per_day, :user_id) "
            "ON CONFLICT (tenant_id) DO UPDATE SET runs_per_minute = excluded.runs_per_minute, "
            "active_runs = excluded.active_runs, queued_runs = excluded.queued_runs, "
            "tokens_per_day = excluded.tokens_per_day, updated_by = excluded.updated_by, "
            "updated_at = now()"
        ),
        {"tenant_id": tenant_id, "user_id": user_id, **columns},
    )


def effective(defaults: QuotaDefaults, tenant: Overrides) -> Limits:
    """The limits in force: the tenant's override where it has one, else the default."""
    by_name: dict[LimitName, Limit] = {}
    for name in LIMIT_NAMES:
        own = tenant[name]
        by_name[name] = (
            Limit(defaults.value(name), "default") if own is None else Limit(own, "tenant")
        )
    return Limits(by_name)


async def limits_of(s: AsyncSession, defaults: QuotaDefaults) -> Limits:
    """The transaction's tenant's limits in force."""
    return effective(defaults, await overrides(s))


def utc_today(now: datetime) -> date:
    """The UTC day of `now` (the token budget's period)."""
    return now.astimezone(UTC).date()


def next_utc_midnight(now: datetime) -> datetime:
    """When the token budget resets."""
    day = utc_today(now)
    return datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)


async def tokens_today(s: AsyncSession, tenant_id: str) -> tuple[int, datetime]:
    """The tenant's model tokens in the current UTC day (database time), and that time."""
    row = (
        await s.execute(
            select(
                func.coalesce(
                    select(func.sum(TenantUsageDaily.input_tokens + TenantUsageDaily.output_tokens))
                    .where(
                        TenantUsageDaily.tenant_id == tenant_id,
                        TenantUsageDaily.day == func.date(func.timezone("UTC", func.now())),
                    )
                    .scalar_subquery(),
                    0,
                ),
                func.now(),
            )
        )
    ).one()
    return int(row[0]), row[1]


_COUNTS = text(
    """
    SELECT count(*) FILTER (WHERE created_at > now() - interval '1 minute') AS last_minute,
           min(created_at) FILTER (WHERE created_at > now() - interval '1 minute') AS oldest,
           count(*) FILTER (WHERE status IN ('running', 'awaiting_approval', 'waiting')) AS active,
           count(*) FILTER (WHERE status = 'queued') AS queued
    FROM agent_run_queue
    WHERE tenant_id = :tenant_id
      AND (created_at > now() - interval '1 minute'
           OR status IN ('queued', 'running', 'awaiting_approval', 'waiting'))
    """
)


async def counts(s: AsyncSession, principal: Principal) -> Counts:
    """What counts against `principal`'s tenant's limits now (database time): every run of the
    tenant, whoever's, so the count is read as the runtime (a member's own RLS shows only the
    runs of its own and shared sessions)."""
    tenant_id = principal.tenant_id
    async with acting_as(s, principal.as_service(), principal):
        row = (await s.execute(_COUNTS, {"tenant_id": tenant_id})).one()
    tokens, now = await tokens_today(s, tenant_id)
    return Counts(
        runs_last_minute=int(row.last_minute),
        oldest_in_minute=row.oldest,
        active=int(row.active),
        queued=int(row.queued),
        tokens_today=tokens,
        now=now,
    )


async def admit_run(s: AsyncSession, principal: Principal, defaults: QuotaDefaults) -> None:
    """Check that the tenant may create one more run now; raise `QuotaExceededError` if not.

    Call it in the transaction that inserts the run, right before the insert: with a counting
    limit set it takes the tenant's advisory lock (held to commit), so the next post of the
    tenant counts this one's run.
    """
    limits = await limits_of(s, defaults)
    counting = limits["runsPerMinute"] or limits["activeRuns"] or limits["queuedRuns"]
    if not counting and not limits["tokensPerDay"]:
        return
    if counting:
        await s.execute(
            text("SELECT pg_advisory_xact_lock(:cls, hashtext(:tenant_id))"),
            {"cls": _LOCK_CLASS, "tenant_id": principal.tenant_id},
        )
    now_counts = await counts(s, principal)
    refusal = refusal_of(limits, now_counts)
    if refusal is not None:
        raise refusal


def refusal_of(limits: Limits, c: Counts) -> QuotaExceededError | None:
    """The first limit a new run would go over, as the error to answer; None: admitted."""
    per_minute = limits["runsPerMinute"]
    if per_minute and c.runs_last_minute >= per_minute:
        oldest = c.oldest_in_minute or c.now
        wait = (oldest + timedelta(minutes=1) - c.now).total_seconds()
        return QuotaExceededError(
            "runsPerMinute", per_minute, c.runs_last_minute, max(1, math.ceil(wait))
        )
    if limits["activeRuns"] and c.active >= limits["activeRuns"]:
        return QuotaExceededError("activeRuns", limits["activeRuns"], c.active, BUSY_RETRY_SECONDS)
    if limits["queuedRuns"] and c.queued >= limits["queuedRuns"]:
        return QuotaExceededError("queuedRuns", limits["queuedRuns"], c.queued, BUSY_RETRY_SECONDS)
    budget = limits["tokensPerDay"]
    if budget and c.tokens_today >= budget:
        wait = (next_utc_midnight(c.now) - c.now).total_seconds()
        return QuotaExceededError("tokensPerDay", budget, c.tokens_today, max(1, math.ceil(wait)))
    return None


async def add_tokens(
    s: AsyncSession, tenant_id: str, input_tokens: int, output_tokens: int, runs: int = 0
) -> None:
    """Add a model call's tokens (or a new run) to the tenant's day (UTC, database time), in one
    of the day's 16 shard rows picked at random (concurrent writers rarely wait for each other;
    readers sum the shards)."""
    await s.execute(
        text(
            "INSERT INTO tenant_usage_daily "
            "(tenant_id, day, shard, input_tokens, output_tokens, runs) "
            "VALUES (:tenant_id, (now() AT TIME ZONE 'UTC')::date, floor(random() * 16)::smallint, "
            ":inp, :out, :runs) "
            "ON CONFLICT (tenant_id, day, shard) DO UPDATE SET "
            "input_tokens = tenant_usage_daily.input_tokens + excluded.input_tokens, "
            "output_tokens = tenant_usage_daily.output_tokens + excluded.output_tokens, "
            "runs = tenant_usage_daily.runs + excluded.runs"
        ),
        {"tenant_id": tenant_id, "inp": input_tokens, "out": output_tokens, "runs": runs},
    )


async def token_budget_left(
    s: AsyncSession, tenant_id: str, defaults: QuotaDefaults
) -> tuple[int, int] | None:
    """(tokens used today, the budget) when the tenant has a daily budget, else None."""
    budget = (await limits_of(s, defaults))["tokensPerDay"]
    if not budget:
        return None
    used, _ = await tokens_today(s, tenant_id)
    return used, budget
