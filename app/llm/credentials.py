"""A tenant's own provider keys, applied to the settings the providers are built from.

The runtime decrypts the tenant's stored keys (`app.tenants.provider_keys`) and hands them here;
this layer never reads the database. A tenant's key for a provider replaces the deployment's
whole configuration of that provider: Gemini with a tenant key is the Gemini API in API-key mode
(never the deployment's Vertex AI project) at the tenant's base URL or Google's default endpoint;
`openai:` models go to the tenant's base URL or api.openai.com. Providers the tenant has no key
for keep the deployment's settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import SecretStr

from app.config import Settings

GEMINI = "gemini"
OPENAI = "openai"


@dataclass(frozen=True, slots=True)
class ProviderCredentials:
    """An API key (left out of `repr`) and optional endpoint for one provider."""

    api_key: str = field(repr=False)
    base_url: str | None = None


def with_credentials(settings: Settings, credentials: dict[str, ProviderCredentials]) -> Settings:
    """`settings` with the providers in `credentials` (`gemini`, `openai`) replaced by them."""
    update: dict[str, Any] = {}
    if (gemini := credentials.get(GEMINI)) is not None:
        update |= {
            "gemini_api_key": SecretStr(gemini.api_key),
            "google_api_key": None,
            "google_genai_use_vertexai": False,
            "google_gemini_base_url": gemini.base_url,
        }
    if (openai := credentials.get(OPENAI)) is not None:
        update |= {"openai_api_key": SecretStr(openai.api_key), "openai_base_url": openai.base_url}
    return settings.model_copy(update=update)
