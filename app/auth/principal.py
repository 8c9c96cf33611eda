"""Who is acting: a user within a tenant, with a role in it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

Role = Literal["owner", "admin", "member", "service"]
"""A principal's role in its tenant.

* `owner`, `admin`: manage the tenant (agents, policies, keys, quotas, the audit trail);
* `member`: runs agents and sees its own sessions and the ones shared with the tenant;
* `service`: the runtime itself acting for a run or a sweep (tenant-wide, never from a token).
"""

TOKEN_ROLES: frozenset[str] = frozenset({"owner", "admin", "member"})
"""Roles a token may carry in `app_metadata.role`."""
ADMIN_ROLES: frozenset[str] = frozenset({"owner", "admin"})
"""Roles that manage the tenant."""
ROLES: tuple[str, ...] = get_args(Role)


def default_role(user_id: str, tenant_id: str) -> Role:
    """A user whose tenant is their own `sub` owns it; anyone else is a member until told."""
    return "owner" if user_id == tenant_id else "member"


@dataclass(frozen=True, slots=True)
class Principal:
    """A verified user, the tenant whose rows they may see, and their role there.

    `role` defaults to `default_role(user_id, tenant_id)`: the rule a token without
    `app_metadata.role` gets, so single-user setups and the dev token own their tenant.
    """

    user_id: str
    tenant_id: str
    role: Role | None = None

    def __post_init__(self) -> None:
        if self.role is None:
            object.__setattr__(self, "role", default_role(self.user_id, self.tenant_id))
        elif self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}")

    @property
    def is_admin(self) -> bool:
        """Whether this principal manages the tenant (owner or admin)."""
        return self.role in ADMIN_ROLES

    def as_service(self) -> Principal:
        """The same user and tenant acting as the runtime (worker, sweeps): tenant-wide rows."""
        return Principal(user_id=self.user_id, tenant_id=self.tenant_id, role="service")

    def db_claims(self) -> dict[str, Any]:
        """The claims set in `request.jwt.claims` for RLS.

        Built from the resolved ids and role (not the raw token) so that the database's idea of
        the tenant and role (`agent_runtime_tenant_id()`, `agent_runtime_role()`) always equals
        ours.
        """
        return {
            "sub": self.user_id,
            "role": "authenticated",
            "app_metadata": {"tenant_id": self.tenant_id, "role": self.role},
        }
