"""The users seen in a tenant's tokens and the role their latest token gave them (`tenant_members`).

Roles live in the identity provider's tokens (`app_metadata.role`), not here: this table records
what the runtime has seen, so that admins can list who uses the tenant and every role change
leaves a `member.role_changed` audit event (written in the same transaction as the change).

`MemberRegistry` keeps an in-process cache so that a request costs a write only when the role
differs from the one last recorded by this process, or once per `refresh_seconds` (to keep
`last_seen_at` roughly current).
"""

from __future__ import annotations

import time

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.audit.record import record_audit
from app.auth.principal import Principal
from app.db.engine import Database
from app.db.models import TenantMember

REFRESH_SECONDS = 600.0
MAX_CACHED = 10_000


async def record_member(s: AsyncSession, principal: Principal) -> str | None:
    """Record that `principal` was seen with its role; returns the role stored before when it
    changed (and then writes `member.role_changed`), else None."""
    who = (TenantMember.tenant_id == principal.tenant_id, TenantMember.user_id == principal.user_id)
    stored = await s.scalar(select(TenantMember.role).where(*who).with_for_update())
    if stored is None:
        added = await s.scalar(
            insert(TenantMember)
            .values(tenant_id=principal.tenant_id, user_id=principal.user_id, role=principal.role)
            .on_conflict_do_nothing()
            .returning(TenantMember.role)
        )
        if added is not None:
            return None
        stored = await s.scalar(select(TenantMember.role).where(*who).with_for_update())
    changed = stored is not None and stored != principal.role
    await s.execute(
        update(TenantMember).where(*who).values(role=principal.role, last_seen_at=func.now())
    )
    if not changed:
        return None
    await record_audit(
        s,
        principal,
        "member.role_changed",
        target_type="member",
        target_id=principal.user_id,
        before={"role": stored},
        after={"role": principal.role},
    )
    return stored


async def list_members(s: AsyncSession, *, limit: int) -> list[TenantMember]:
    """The tenant's members (as RLS lets the caller see them), most recently seen first."""
    rows = await s.scalars(
        select(TenantMember)
        .order_by(TenantMember.last_seen_at.desc(), TenantMember.user_id)
        .limit(limit)
    )
    return list(rows)


class MemberRegistry:
    """Records the principals of requests in `tenant_members`, skipping what it recorded lately."""

    def __init__(self, refresh_seconds: float = REFRESH_SECONDS) -> None:
        self.refresh_seconds = refresh_seconds
        self._seen: dict[tuple[str, str], tuple[str, float]] = {}

    async def observe(self, db: Database, principal: Principal) -> None:
        """Record `principal` unless this process recorded the same role within the refresh
        interval (the runtime's own `service` principals are not members)."""
        if principal.role == "service":
            return
        key = (principal.tenant_id, principal.user_id)
        now = time.monotonic()
        seen = self._seen.get(key)
        if seen is not None and seen[0] == principal.role and now - seen[1] < self.refresh_seconds:
            return
        async with db.tenant(principal) as s:
            await record_member(s, principal)
        if len(self._seen) >= MAX_CACHED:
            self._seen.clear()
        assert principal.role is not None
        self._seen[key] = (principal.role, now)
