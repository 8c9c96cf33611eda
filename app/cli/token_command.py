"""`agent-runtime token`: minting a JWT signed with the configured or the local secret."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from app.cli.errors import EXIT_OK

if TYPE_CHECKING:
    from app.config import Settings


def cmd_token(args: argparse.Namespace, settings: Settings) -> int:
    """`token`: print a JWT."""
    print(mint(settings, args.user, args.tenant, args.ttl, role=args.role))
    return EXIT_OK


def mint(
    settings: Settings, user: str, tenant: str | None, ttl: int = 86400, *, role: str | None = None
) -> str:
    from app.auth.jwt import mint_token
    from app.auth.secret import ensure_jwt_secret

    return mint_token(
        ensure_jwt_secret(settings),
        user_id=user,
        tenant_id=tenant,
        role=role,
        ttl_seconds=ttl,
        audience=settings.jwt_audience,
    )
