"""Write one audit event in the caller's transaction, so the record and the change commit together.

Actions are `<target>.<verb>` (`agent.created`, `policy.updated`, `approval.denied`, `run.failed`,
`tool.executed` …). `before`/`after` carry the changed object's public fields where a change has
them; never a secret (tenant keys are recorded by their last 4 characters only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.principal import Principal
from app.core.request_id import current_request_id

# Plain SQL without RETURNING: a member may add an event it is not allowed to read back (RLS
# checks a RETURNING row against the read policy), and the ORM would ask for the new id.
_INSERT = text(
    "INSERT INTO audit_events (tenant_id, actor_id, actor_role, action, target_type, target_id,"
    " before, after, request_id) VALUES (:tenant_id, :actor_id, :actor_role, :action,"
    " :target_type, :target_id, :before, :after, :request_id)"
).bindparams(
    bindparam("before", type_=JSONB(none_as_null=True)),
    bindparam("after", type_=JSONB(none_as_null=True)),
)


async def record_audit(
    session: AsyncSession,
    principal: Principal,
    action: str,
    *,
    target_type: str,
    target_id: str | None = None,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    request_id: str | None = None,
) -> None:
    """Insert an audit event for `principal`'s tenant in `session`'s transaction.

    `request_id` defaults to the HTTP request being served (None in the worker).
    """
    await session.execute(
        _INSERT,
        {
            "tenant_id": principal.tenant_id,
            "actor_id": principal.user_id,
            "actor_role": principal.role,
            "action": action,
            "target_type": target_type,
            "target_id": target_id,
            "before": dict(before) if before is not None else None,
            "after": dict(after) if after is not None else None,
            "request_id": request_id if request_id is not None else current_request_id(),
        },
    )
