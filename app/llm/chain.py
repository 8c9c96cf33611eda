"""An agent's models in order of preference (its model, then its `fallbackModels`), and which
failures move a run from one to the next.

A failure falls back when another model can plausibly succeed where this one failed: the
provider, its key or the model is the problem, not what we asked. `FALLBACK_CODES` is the table
(docs/models.md, "Fallback models", explains each line):

| code | falls back | why |
|---|---|---|
| `model_unavailable_transient` (5xx, 529, timeouts, refused or broken connections, after the retries) | yes | the provider is down or overloaded |
| `model_rate_limited` (429 after the retries) | yes | this provider's quota, not another's |
| `model_not_found` (404) | yes | this provider does not serve the model (any more) |
| `model_context_too_long` | yes, after one forced compaction on the same model | another model may have a larger window |
| `model_auth_failed` (401/403, invalid key, Vertex AI credentials) | yes | a key of one provider; another provider has its own |
| `model_unavailable` (the provider is not configured here) | yes | the same: configuration of one provider |
| `model_bad_request` (other 4xx) | no | our request is wrong; another model would be asked the same |
| `model_safety_block` | no | a provider's safety filter is not routed around |
| `model_error` (anything unexpected) | no | a bug to see, not to hide |

`ModelChain` walks the list: names are resolved lazily (a fallback whose provider is not
configured is skipped when it is reached, not when the run starts) and each model is tried at most
once per chain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from app.llm.base import Model, ModelError
from app.llm.failures import (
    AUTH_FAILED,
    CONTEXT_TOO_LONG,
    NOT_FOUND,
    RATE_LIMITED,
    UNAVAILABLE_TRANSIENT,
)
from app.llm.registry import MODEL_UNAVAILABLE, ModelRegistry, ModelUnavailableError

FALLBACK_CODES: Final = frozenset(
    {
        UNAVAILABLE_TRANSIENT,
        RATE_LIMITED,
        NOT_FOUND,
        CONTEXT_TOO_LONG,
        AUTH_FAILED,
        MODEL_UNAVAILABLE,
    }
)
"""`ModelError` codes after which the next model of an agent's list is tried."""
MAX_FALLBACK_MODELS: Final = 5
"""Most fallback models an agent may list."""


def falls_back(code: str) -> bool:
    """Whether a model call that failed with `code` is tried again on the next model."""
    return code in FALLBACK_CODES


@dataclass(frozen=True, slots=True)
class Skipped:
    """A model of the list passed over without a call: its name and why."""

    name: str
    error: ModelError


@dataclass(slots=True)
class ModelChain:
    """A model and its fallbacks, resolved through `registry`; `current` is the one in use."""

    registry: ModelRegistry
    names: list[str]
    """The distinct model names in order (`default` replaced by the default model's name)."""
    position: int = -1
    """Index of the current model in `names` (-1 before `start`)."""
    skipped: list[Skipped] = field(default_factory=list)
    """Models passed over by the latest `start` or `advance`."""

    @classmethod
    def of(cls, registry: ModelRegistry, model: str, fallbacks: Sequence[str] = ()) -> ModelChain:
        """The chain of `model` then `fallbacks`, duplicates dropped."""
        names: list[str] = []
        for name in (model, *fallbacks):
            if (canonical := registry.canonical(name)) not in names:
                names.append(canonical)
        return cls(registry, names)

    @property
    def current(self) -> str:
        """The name of the model in use."""
        return self.names[self.position]

    def start(self) -> Model:
        """The first model of the list that resolves; raises the first model's
        `ModelUnavailableError` when none does."""
        self.position = 0
        try:
            model = self.registry.resolve(self.names[0])
        except ModelUnavailableError as exc:
            found = self.advance()
            self.skipped.insert(0, Skipped(self.names[0], exc))
            if found is None:
                raise
            return found
        self.skipped = []
        return model

    def advance(self, accept: Callable[[str], bool] | None = None) -> Model | None:
        """The next model after the current one that resolves (and that `accept` takes, if
        given), now current; None when the list is exhausted (the current one stays)."""
        self.skipped = []
        for position in range(self.position + 1, len(self.names)):
            name = self.names[position]
            if accept is not None and not accept(name):
                continue
            try:
                model = self.registry.resolve(name)
            except ModelUnavailableError as exc:
                self.skipped.append(Skipped(name, exc))
                continue
            self.position = position
            return model
        return None
