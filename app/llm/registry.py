"""Resolving an agent's model name (`offline`, later `gemini-…`, `openai:…`) to a `Model`.

Names resolve exactly first, then by prefix (providers register `gemini-` or `openai:` and get the
rest of the name). `default` is an alias picked from what is configured: `offline` when no
provider API key is configured (the only possibility until real providers are added).
"""

from __future__ import annotations

from collections.abc import Callable

from app.config import Settings
from app.llm.base import Model, ModelError
from app.llm.offline import OfflineModel

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
        self._cache: dict[str, Model] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelRegistry:
        """The models this deployment can use. Offline only, until providers with keys exist."""
        del settings  # providers will read their API keys from here
        registry = cls(default="offline")
        registry.register("offline", OfflineModel)
        return registry

    def register(self, name: str, factory: ModelFactory) -> None:
        """Serve exactly `name` with `factory`."""
        self._exact[name] = factory

    def register_prefix(self, prefix: str, factory: ModelFactory) -> None:
        """Serve every name starting with `prefix` (e.g. `openai:`) with `factory`."""
        self._prefixes[prefix] = factory

    def names(self) -> list[str]:
        """Exact names and prefixes (`openai:*`) served, for error messages and listings."""
        return sorted([*self._exact, *(f"{p}*" for p in self._prefixes)])

    def resolve(self, name: str | None) -> Model:
        """The model for `name` (`None`/empty/`default` → the default model).

        Raises `ModelUnavailableError` with a message naming what is available.
        """
        wanted = self.default if not name or name == DEFAULT_ALIAS else name
        if (model := self._cache.get(wanted)) is not None:
            return model
        factory = self._exact.get(wanted)
        if factory is None:
            prefix = max((p for p in self._prefixes if wanted.startswith(p)), key=len, default=None)
            factory = None if prefix is None else self._prefixes[prefix]
        if factory is None:
            available = ", ".join(self.names()) or "none"
            raise ModelUnavailableError(
                f"model {wanted!r} is not available in this deployment (available: {available})"
            )
        model = factory(wanted)
        self._cache[wanted] = model
        return model
