"""Request and response bodies of the members API."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from app.api.schemas import ApiModel


class MemberInfo(ApiModel):
    """A user seen in the tenant's tokens, with the role their latest token gave them."""

    user_id: str = Field(description="The token's `sub`.")
    role: Literal["owner", "admin", "member"] = Field(
        description="From the token's `app_metadata.role` (changes are audited as "
        "`member.role_changed`)."
    )
    first_seen_at: datetime
    last_seen_at: datetime = Field(
        description="Last request seen (kept current to within about ten minutes)."
    )


class MemberList(ApiModel):
    """The tenant's members, most recently seen first."""

    members: list[MemberInfo]
