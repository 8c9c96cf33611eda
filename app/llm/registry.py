"""Resolving an agent's model name (`offline`, `gemini-…`, `openai:…`) to a `Model`.

Names resolve exactly first, then by prefix (providers register `gemini-` or `openai:` and get the
whole name). `default` (or no name) means the `DEFAULT_MODEL` setting (when not set:
`gemini-2.5-flash` if Gemini is configured, else `offline`; see `Settings.default_model`); it
resolves like any other name.

Which providers exist depends on the settings: `offline` always; `gemini-*` and
`models/gemini-*` with a Gemini API key or Vertex AI settings (`gemini.py`); `openai:*` with an
OpenAI key or base URL (`openai_compat.py`). A name of an unconfigured provider fails with
`ModelUnavailableError` saying which settings would enable it. A tenant's own keys come in as
settings too (`credentials.with_credentials`); `release` drops such a registry's SDK clients.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from app.config import Settings
from app.llm.base import Model, ModelError
from app.llm.clients import SharedClient
from app.llm.offline import OfflineModel
from app.llm.provider_names import (
    GEMINI_HINT,
    GEMINI_PREFIXES,
    OPENAI_HINT,
    OPENAI_PREFIX,
    gemini_configured,
    openai_configured,
)
from app.llm.retry import RetryPolicy

ModelFactory = Callable[[str], Model]
"""Builds the model for a (full) model name."""

DEFAULT_ALIAS = "default"
MODEL_UNAVAILABLE = "model_unavailable"


class ModelUnavailableError(ModelError):
    """No provider serves the requested model name (or it is not configured)."""

    def __init__(self, message: str) -> None:
        super().__init__(MODEL_UNAVAILABLE, message)


class ModelRegistry:
    """Model names → factories; `resolve` builds (and caches) the `Model` for a name."""

    def __init__(self, *, default: str = "offline") -> None:
        self.default = default
        self._exact: dict[str, ModelFactory] = {}
        self._prefixes: dict[str, ModelFactory] = {}
        self._hints: dict[str, str] = {}
        self._cache: dict[str, Model] = {}
        self._clients: list[SharedClient[Any]] = []

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelRegistry:
        """The models this deployment can use: `offline`, plus each configured provider."""
        registry = cls(default=settings.default_model)
        registry.register("offline", OfflineModel)
        policy = RetryPolicy.from_settings(settings)
        # Each SDK is imported only when its provider is configured (see provider_names.py).
        if gemini_configured(settings):
            from app.llm import gemini

            gemini_models = gemini.factory(settings, policy)
            for prefix in GEMINI_PREFIXES:
                registry.register_prefix(prefix, gemini_models)
            registry._own(gemini_models)
        else:
            for prefix in GEMINI_PREFIXES:
                registry.hint(prefix, GEMINI_HINT)
        if openai_configured(settings):
            from app.llm import openai_compat

            openai_models = openai_compat.factory(settings, policy)
            registry.register_prefix(OPENAI_PREFIX, openai_models)
            registry._own(openai_models)
        else:
            registry.hint(OPENAI_PREFIX, OPENAI_HINT)
        return registry

    def _own(self, factory: partial[Any]) -> None:
        """Remember the shared client behind a provider's factory, for `release`."""
        self._clients.append(factory.keywords["client"])

    def release(self) -> None:
        """Forget the SDK clients of this registry's providers (its configuration is gone)."""
        for client in self._clients:
            client.forget()
        self._cache.clear()

    def register(self, name: str, factory: ModelFactory) -> None:
        """Serve exactly `name` with `factory`."""
        self._exact[name] = factory

    def register_prefix(self, prefix: str, factory: ModelFactory) -> None:
        """Serve every name starting with `prefix` (e.g. `openai:`) with `factory`."""
        self._prefixes[prefix] = factory

    def hint(self, prefix: str, how: str) -> None:
        """Say how to configure the (unregistered) provider of names starting with `prefix`."""
        self._hints[prefix] = how

    def names(self) -> list[str]:
        """Exact names and prefixes (`openai:*`) served, for error messages and listings."""
        return sorted([*self._exact, *(f"{p}*" for p in self._prefixes)])

    def canonical(self, name: str | None) -> str:
        """The name `name` resolves by: `None`, empty and `default` are the default model's."""
        return self.default if not name or name == DEFAULT_ALIAS else name

    def resolve(self, name: str | None) -> Model:
        """The model for `name` (`None`/empty/`default` → the default model).

        Raises `ModelUnavailableError` with a message naming what is available.
        """
        wanted = self.canonical(name)
        if (model := self._cache.get(wanted)) is not None:
            return model
        factory = self._exact.get(wanted)
        if factory is None:
            prefix = max((p for p in self._prefixes if wanted.startswith(p)), key=len, default=None)
            # a bare prefix (`openai:`) names no model
            factory = None if prefix is None or prefix == wanted else self._prefixes[prefix]
        if factory is None:
            available = ", ".join(self.names()) or "none"
            how = next((h for p, h in self._hints.items() if wanted.startswith(p)), None)
            why = "is not available in this deployment"
            if how:
                why = f"is not configured in this deployment; to use it, {how}"
            raise ModelUnavailableError(f"model {wanted!r} {why} (available: {available})")
        model = factory(wanted)
        self._cache[wanted] = model
        return model
