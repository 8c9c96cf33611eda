"""`DEFAULT_MODEL`: Gemini when it is configured and no default is set, else `offline`; an
explicit DEFAULT_MODEL always wins. Settings are read from the (patched) environment, as the
processes read them."""

from __future__ import annotations

import pytest

from app.config import Settings
from app.llm.gemini import GeminiModel
from app.llm.offline import OfflineModel
from app.llm.registry import ModelRegistry

PROVIDER_VARIABLES = (
    "DEFAULT_MODEL",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The environment without any model provider setting."""
    for name in PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def from_env() -> Settings:
    return Settings(_env_file=None)


def test_offline_without_gemini(env: pytest.MonkeyPatch) -> None:
    assert from_env().default_model == "offline"
    env.setenv("OPENAI_API_KEY", "sk-test-0123456789")  # OpenAI alone does not change it
    assert from_env().default_model == "offline"
    assert isinstance(ModelRegistry.from_settings(from_env()).resolve("default"), OfflineModel)


@pytest.mark.parametrize("variable", ["GEMINI_API_KEY", "GOOGLE_API_KEY"])
def test_gemini_key_makes_gemini_the_default(env: pytest.MonkeyPatch, variable: str) -> None:
    env.setenv(variable, "test-gemini-key-0123456789")
    settings = from_env()
    assert settings.default_model == "gemini-2.5-flash"
    registry = ModelRegistry.from_settings(settings)
    model = registry.resolve("default")
    assert isinstance(model, GeminiModel) and model.name == "gemini-2.5-flash"
    assert registry.resolve(None) is model


def test_vertex_settings_make_gemini_the_default(env: pytest.MonkeyPatch) -> None:
    env.setenv("GOOGLE_GENAI_USE_VERTEXAI", "true")
    env.setenv("GOOGLE_CLOUD_PROJECT", "my-project")
    assert from_env().default_model == "offline"  # no location: Vertex AI is not configured
    env.setenv("GOOGLE_CLOUD_LOCATION", "us-central1")
    assert from_env().default_model == "gemini-2.5-flash"


@pytest.mark.parametrize("explicit", ["offline", "openai:gpt-4o-mini", "gemini-2.5-pro"])
def test_explicit_default_model_wins(env: pytest.MonkeyPatch, explicit: str) -> None:
    env.setenv("GEMINI_API_KEY", "test-gemini-key-0123456789")
    env.setenv("DEFAULT_MODEL", explicit)
    assert from_env().default_model == explicit
    env.delenv("DEFAULT_MODEL")
    assert Settings(_env_file=None, default_model=explicit).default_model == explicit


def test_empty_values_count_as_unset(env: pytest.MonkeyPatch) -> None:
    # `.env.example` lines uncommented as they are (`GEMINI_API_KEY=`, `DEFAULT_MODEL=`)
    env.setenv("GEMINI_API_KEY", "")
    env.setenv("DEFAULT_MODEL", "")
    settings = from_env()
    assert settings.default_model == "offline"
    assert "gemini-*" not in ModelRegistry.from_settings(settings).names()
    env.setenv("GOOGLE_API_KEY", "test-gemini-key-0123456789")
    assert from_env().default_model == "gemini-2.5-flash"
