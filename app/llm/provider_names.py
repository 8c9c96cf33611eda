"""What the registry needs to know of each SDK-backed provider before (or without) loading it:
the model-name prefixes it serves, and the settings that would enable it.

Kept apart from `gemini.py` and `openai_compat.py` so that resolving names, and hinting at an
unconfigured provider, never imports an SDK: `google-genai` and `openai` take most of a process's
start-up time, and a process only loads the ones its settings enable.
"""

from __future__ import annotations

from app.config import Settings

GEMINI_PREFIXES = ("gemini-", "models/gemini-")
GEMINI_HINT = (
    "set GEMINI_API_KEY (or GOOGLE_API_KEY), or GOOGLE_GENAI_USE_VERTEXAI=true with "
    "GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION"
)
OPENAI_PREFIX = "openai:"
OPENAI_HINT = "set OPENAI_API_KEY, or OPENAI_BASE_URL for a local OpenAI-compatible server"


def gemini_configured(settings: Settings) -> bool:
    """Whether the settings enable Gemini (an API key, or Vertex AI with project and location)."""
    return settings.gemini_configured()


def openai_configured(settings: Settings) -> bool:
    """Whether the settings enable `openai:` models (an API key or a base URL)."""
    return settings.openai_api_key is not None or bool(settings.openai_base_url)


def known_model_name(name: str) -> bool:
    """Whether `name` is of a form some provider serves (`offline`, `default`, `gemini-…`,
    `models/gemini-…`, `openai:<model>`), configured here or not."""
    if name in ("offline", "default"):
        return True
    prefixes = (*GEMINI_PREFIXES, OPENAI_PREFIX)
    return any(name.startswith(p) and len(name) > len(p) for p in prefixes)
