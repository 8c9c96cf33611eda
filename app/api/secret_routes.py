"""What the routes that store tenant secrets share (provider keys, HTTP tools, MCP servers): the
admins-only and missing-SECRETS_KEY answers they document, and the keyring they seal with."""

from __future__ import annotations

from app.api.errors import ApiError
from app.api.schemas import ErrorResponse
from app.config import Settings
from app.tenants.crypto import Keyring, SecretsKeyError, keyring_from_settings

SECRETS_KEY_MISSING = "secrets_key_missing"
ADMIN_ONLY: dict[int | str, dict[str, object]] = {
    403: {"model": ErrorResponse, "description": "`forbidden_role`: owners and admins only."}
}
"""The 403 of a route for owners and admins (OpenAPI `responses`)."""
NO_SECRETS_KEY: dict[int | str, dict[str, object]] = {
    503: {
        "model": ErrorResponse,
        "description": "`secrets_key_missing`: the deployment has no SECRETS_KEY to encrypt with.",
    }
}
"""The 503 of a route that seals secrets (OpenAPI `responses`)."""


def sealing_keyring(settings: Settings, what: str) -> Keyring:
    """The SECRETS_KEY keyring to seal `what` (e.g. "provider keys") with; 503
    `secrets_key_missing` when SECRETS_KEY is unset or invalid."""
    keyring = optional_keyring(settings)
    if keyring is None:
        raise ApiError(
            503,
            f"this deployment cannot store {what}: set SECRETS_KEY (kid:base64 of 32 random "
            "bytes) on the API and the workers",
            code=SECRETS_KEY_MISSING,
        )
    return keyring


def optional_keyring(settings: Settings) -> Keyring | None:
    """The SECRETS_KEY keyring, None when unset; 503 `secrets_key_missing` when invalid."""
    try:
        return keyring_from_settings(settings)
    except SecretsKeyError as exc:
        raise ApiError(503, f"SECRETS_KEY is invalid: {exc}", code=SECRETS_KEY_MISSING) from None
