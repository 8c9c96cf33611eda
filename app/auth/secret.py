"""The HS256 secret tokens are signed with: SUPABASE_JWT_SECRET, else one generated for this machine.

A generated secret is stored in `<AGENT_RUNTIME_DATA_DIR>/jwt-secret` (mode 0600) so that tokens
minted by `agent-runtime token` or printed by `serve` stay valid across restarts.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from app.config import Settings

SECRET_FILE = "jwt-secret"


def secret_path(settings: Settings) -> Path:
    """Where the generated secret lives."""
    return settings.agent_runtime_data_dir / SECRET_FILE


def uses_generated_secret(settings: Settings) -> bool:
    """True when SUPABASE_JWT_SECRET is unset (or empty) and the local secret file is used."""
    return not settings.supabase_jwt_secret


def ensure_jwt_secret(settings: Settings) -> str:
    """`settings.supabase_jwt_secret` if set; else the local secret, created on first use."""
    if settings.supabase_jwt_secret:
        return settings.supabase_jwt_secret
    return ensure_secret_file(secret_path(settings), lambda: secrets.token_urlsafe(48))


def ensure_secret_file(path: Path, generate: Callable[[], str]) -> str:
    """The secret stored in `path` (mode 0600), created from `generate()` on first use.

    Used for every secret generated on this machine (the JWT secret, the secrets key).
    """
    existing = _read(path)
    if existing:
        return existing
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = generate()
    # Write a private temp file, then link it into place: readers never see a partial file and
    # two processes racing to create it agree on the one that won.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secret + "\n")
        try:
            os.link(tmp, path)
        except FileExistsError:
            if not _read(path):  # an empty leftover file: replace it
                os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    winner = _read(path)
    if not winner:
        raise RuntimeError(f"could not create the secret file {path}")
    return winner


def _read(path: Path) -> str | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)  # someone loosened it; a generated secret is for this user only
    return text or None
