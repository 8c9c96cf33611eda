"""Who is acting: a user within a tenant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Principal:
    """A verified user and the tenant whose rows they may see."""

    user_id: str
    tenant_id: str

    def db_claims(self) -> dict[str, Any]:
        """The claims set in `request.jwt.claims` for RLS.

        Built from the resolved ids (not the raw token) so that the database's idea of the tenant
        (`agent_runtime_tenant_id()`: app_metadata.tenant_id, else sub) always equals ours.
        """
        return {
            "sub": self.user_id,
            "role": "authenticated",
            "app_metadata": {"tenant_id": self.tenant_id},
        }
