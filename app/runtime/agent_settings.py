"""An agent's loop settings kept in `agents.settings` (JSONB): mode, run timeout, token budget,
context window.

Stored camelCase like every other JSON we write. Keys this model does not know are left alone
(other features may keep their own settings in the same object): `merge_settings` only replaces
its own keys, and reading ignores the rest.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from app.queue.busy import IfBusy

__all__ = ["AgentMode", "AgentSettings", "IfBusy", "merge_settings"]

AgentMode = Literal["chat", "plan"]
"""`chat`: answer directly, calling tools as needed; `plan`: plan first, then run the steps."""

MAX_TIMEOUT_SECONDS = 86_400
MAX_TOKEN_BUDGET = 1_000_000_000
MIN_CONTEXT_WINDOW = 512
MAX_CONTEXT_WINDOW = 10_000_000


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
