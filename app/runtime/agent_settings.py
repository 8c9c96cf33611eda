"""An agent's loop settings kept in `agents.settings` (JSONB): mode, run timeout, token budget,
context window, fallback models.

Stored camelCase like every other JSON we write. Keys this model does not know are left alone
(other features may keep their own settings in the same object): `merge_settings` only replaces
its own keys, and reading ignores the rest.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from app.llm.chain import MAX_FALLBACK_MODELS
from app.llm.provider_names import known_model_name
from app.queue.busy import IfBusy

__all__ = ["AgentMode", "AgentSettings", "IfBusy", "check_fallback_models", "merge_settings"]

AgentMode = Literal["chat", "plan"]
"""`chat`: answer directly, calling tools as needed; `plan`: plan first, then run the steps."""

MAX_TIMEOUT_SECONDS = 86_400
MAX_TOKEN_BUDGET = 1_000_000_000
MIN_CONTEXT_WINDOW = 512
MAX_CONTEXT_WINDOW = 10_000_000
MODEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9:_./@+-]*$"
MAX_MODEL_CHARS = 200


def check_fallback_models(names: Sequence[str]) -> Sequence[str]:
    """`names` if each is a model name of a known provider's form, listed once; else
    `ValueError` saying which is not (a 422 in the API)."""
    if len(names) > MAX_FALLBACK_MODELS:
        raise ValueError(f"at most {MAX_FALLBACK_MODELS} fallback models")
    seen: set[str] = set()
    for i, name in enumerate(names):
        where = f"fallbackModels[{i}] {name[:MAX_MODEL_CHARS]!r}"
        if not 0 < len(name) <= MAX_MODEL_CHARS or not re.match(MODEL_PATTERN, name):
            raise ValueError(f"{where} is not a model name")
        if not known_model_name(name):
            raise ValueError(
                f"{where} is not a model name of a known provider: use `offline`, `default`, "
                "`gemini-…`, `models/gemini-…` or `openai:<model>`"
            )
        if name in seen:
            raise ValueError(f"{where} is listed twice")
        seen.add(name)
    return names


class AgentSettings(BaseModel):
    """The loop settings of one agent (absent keys: the defaults)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )

    mode: AgentMode = "chat"
    timeout_seconds: int | None = Field(default=None, ge=1, le=MAX_TIMEOUT_SECONDS)
    """Wall-clock limit of a run; None: the server's `RUN_TIMEOUT_SECONDS`."""
    token_budget: int | None = Field(default=None, ge=1, le=MAX_TOKEN_BUDGET)
    """Most input + output tokens a run may use; None: unlimited."""
    context_window: int | None = Field(default=None, ge=MIN_CONTEXT_WINDOW, le=MAX_CONTEXT_WINDOW)
    """The model's context window in tokens; None: the model's known window, else the server's
    `CONTEXT_WINDOW_TOKENS` (`app.llm.windows`). Contexts are compacted to fit it."""

    if_busy: IfBusy = "enqueue"
    """The default `ifBusy` of messages posted to this agent's sessions."""
    max_spawn_depth: int | None = Field(default=None, ge=1, le=10)
    """Sub-agents: the deepest a spawn chain may go; None: the server's `SUBAGENT_MAX_DEPTH`."""
    max_children_per_run: int | None = Field(default=None, ge=1, le=100)
    """Sub-agents one run may spawn; None: the server's `SUBAGENT_MAX_CHILDREN_PER_RUN`."""
    max_exchanges: int | None = Field(default=None, ge=1, le=100)
    """`sessions_send` messages between two sessions per originating run; None: the server's
    `AGENT_MESSAGE_MAX_EXCHANGES`."""
    fallback_models: tuple[str, ...] = ()
    """Models tried in order when the agent's model fails in a way another model can fix
    (`app.llm.chain`); empty: none."""

    _valid_fallbacks = field_validator("fallback_models")(check_fallback_models)

    @classmethod
    def of(cls, stored: dict[str, Any] | None) -> AgentSettings:
        """Parse a stored `agents.settings` object (raises pydantic's ValidationError)."""
        return cls.model_validate(stored or {})

    def dump(self) -> dict[str, Any]:
        """The JSON kept in `agents.settings` (camelCase; unset limits stored as null)."""
        return self.model_dump(mode="json", by_alias=True)


def merge_settings(stored: dict[str, Any] | None, settings: AgentSettings) -> dict[str, Any]:
    """`stored` with this model's keys replaced by `settings` (other keys kept)."""
    return {**(stored or {}), **settings.dump()}
