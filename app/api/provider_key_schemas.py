"""Request and response bodies of the tenant provider keys API (`/provider-keys`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import ConfigDict, Field, field_validator

from app.api.schemas import ApiModel

MIN_KEY_CHARS = 8
"""Shorter keys could not be masked reliably in provider errors and logs."""


class ProviderKeyBody(ApiModel):
    """A tenant's key (and optional endpoint) for one provider; replaces a stored one."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"apiKey": "sk-…", "baseUrl": "https://api.openai.com/v1"},
                {"apiKey": "AIza…"},
            ]
        }
    )

    api_key: str = Field(
        min_length=MIN_KEY_CHARS,
        max_length=4096,
        description="The provider API key. Stored encrypted; never returned (only its last 4 "
        "characters).",
    )
    base_url: str | None = Field(
        default=None,
        max_length=2048,
        description="The provider endpoint (https; http only to loopback); unset: the provider's "
        "public API (Google's Gemini API, api.openai.com).",
    )

    @field_validator("api_key")
    @classmethod
    def _one_token(cls, value: str) -> str:
        value = value.strip()
        if len(value) < MIN_KEY_CHARS:
            raise ValueError(f"must be at least {MIN_KEY_CHARS} characters")
        if any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError("must not contain whitespace or control characters")
        return value

    @field_validator("base_url")
    @classmethod
    def _blank_is_unset(cls, value: str | None) -> str | None:
        return (value or "").strip() or None


class ProviderKeyInfo(ApiModel):
    """A stored key as the API shows it: never the key, only its last 4 characters."""

    provider: str = Field(description="`gemini` or `openai`.")
    last4: str = Field(description="The key's last 4 characters.")
    base_url: str | None
    key_id: str = Field(description="The SECRETS_KEY entry it is encrypted with.")
    updated_at: datetime


class ProviderKeyList(ApiModel):
    """The tenant's stored provider keys (providers without one use the deployment's)."""

    keys: list[ProviderKeyInfo]
