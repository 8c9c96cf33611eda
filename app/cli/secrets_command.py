"""`agent-runtime secrets reencrypt`: re-encrypt every stored tenant secret under the current key.

Run after putting a new key first in SECRETS_KEY (keeping the old one after it); once it reports
every row current, the old key can be removed. Runs as the database owner, across tenants.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING

from app.cli.errors import EXIT_OK, CliError

if TYPE_CHECKING:
    from app.config import Settings
    from app.tenants.crypto import Keyring
    from app.tenants.provider_keys import ReencryptCounts


def cmd_secrets_reencrypt(args: argparse.Namespace, settings: Settings) -> int:
    """`secrets reencrypt`: re-seal every stored secret (provider keys, HTTP tools' headers and
    signing secrets, MCP servers' headers and env) not under SECRETS_KEY's first key."""
    from app.serve import database, require_migrated
    from app.tenants.crypto import SecretsKeyError, keyring_from_settings

    try:
        keyring = keyring_from_settings(settings)
    except SecretsKeyError as exc:
        raise CliError(f"SECRETS_KEY is invalid: {exc}") from None
    if keyring is None:
        raise CliError("SECRETS_KEY is not set: nothing to re-encrypt with")
    with database(settings) as url:
        require_migrated(url)
        counts = asyncio.run(_reencrypt(url, keyring))
    for label, done in counts:
        print(
            f"{label}: {done.total} stored, {done.reencrypted} re-encrypted under "
            f"{keyring.current_id!r}, {done.current} already current"
        )
    return EXIT_OK


async def _reencrypt(url: str, keyring: Keyring) -> list[tuple[str, ReencryptCounts]]:
    """Re-seal every kind of stored secret in ONE transaction: all or nothing."""
    from app.db.engine import Database
    from app.tenants import provider_keys
    from app.tenants.provider_keys import SecretsUnavailableError
    from app.tools.http import store as http_tools
    from app.tools.mcp import store as mcp_servers

    db = Database(url, pool_size=1, max_overflow=0)
    try:
        async with db.owner() as s:
            return [
                ("provider keys", await provider_keys.reencrypt_all(s, keyring)),
                ("http tools", await http_tools.reencrypt_all(s, keyring)),
                ("mcp servers", await mcp_servers.reencrypt_servers(s, keyring)),
            ]
    except SecretsUnavailableError as exc:
        raise CliError(f"nothing was changed: {exc}") from None
    finally:
        await db.dispose()
