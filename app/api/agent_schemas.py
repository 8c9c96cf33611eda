"""Request and response bodies of the agents API (camelCase on the wire).

`mode`, `timeoutSeconds`, `tokenBudget`, `contextWindow`, `ifBusy`, `maxSpawnDepth`,
`maxChildrenPerRun`, `maxExchanges` and `fallbackModels` are kept in `agents.settings`
(`app.runtime.agent_settings.AgentSettings`); the rest are columns of `agents`.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import ConfigDict, Field, field_validator

from app.api.schemas import MAX_MESSAGE_CHARS, ApiModel
from app.db.text import storable_text
from app.llm.chain import MAX_FALLBACK_MODELS
from app.runtime.agent_settings import (
    MAX_CONTEXT_WINDOW,
    MAX_TIMEOUT_SECONDS,
    MAX_TOKEN_BUDGET,
    MIN_CONTEXT_WINDOW,
    AgentMode,
    IfBusy,
    check_fallback_models,
)

MAX_NAME_CHARS = 100
MAX_TURNS_LIMIT = 100  # the `agents.max_turns` CHECK constraint
MODEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9:_./@+-]*$"


def _name(default: Any = ...) -> Any:
    return Field(
        default, min_length=1, max_length=MAX_NAME_CHARS, description="Unique within the tenant."
    )


def _model(default: Any = None) -> Any:
    return Field(
        default,
        min_length=1,
        max_length=200,
        pattern=MODEL_PATTERN,
        description="`offline`, `gemini-…`, `openai:…` or `default` (checked when a run starts); "
        "omitted on create: the server's DEFAULT_MODEL.",
    )


def _prompt(default: Any = None) -> Any:
    return Field(default, max_length=MAX_MESSAGE_CHARS, description="The system prompt.")


def _turns(default: Any = None) -> Any:
    return Field(
        default,
        ge=1,
        le=MAX_TURNS_LIMIT,
        description="Model turns per run (per step in plan mode); omitted on create: the "
        "server's MAX_TURNS.",
    )


def _mode(default: Any) -> Any:
    return Field(
        default, description="`chat`: answer directly; `plan`: plan first, then run the steps."
    )


def _timeout(default: Any = None) -> Any:
    return Field(
        default,
        ge=1,
        le=MAX_TIMEOUT_SECONDS,
        description="Wall-clock limit of a run in seconds; null: the server's RUN_TIMEOUT_SECONDS.",
    )


def _budget(default: Any = None) -> Any:
    return Field(
        default,
        ge=1,
        le=MAX_TOKEN_BUDGET,
        description="Most input + output tokens per run; null: unlimited.",
    )


def _window(default: Any = None) -> Any:
    return Field(
        default,
        ge=MIN_CONTEXT_WINDOW,
        le=MAX_CONTEXT_WINDOW,
        description="The model's context window in tokens (older messages are compacted to fit "
        "it); null: the model's known window, else the server's CONTEXT_WINDOW_TOKENS.",
    )


def _if_busy(default: Any = None) -> Any:
    return Field(
        default,
        description="What a message posted to one of this agent's busy sessions does when it "
        "names no `ifBusy`: `enqueue` (the default), `reject`, `interrupt`, `steer`, `collect`.",
    )


def _spawn_depth(default: Any = None) -> Any:
    return Field(
        default,
        ge=1,
        le=10,
        description="Sub-agents: the deepest a spawn chain may go; null: the server's "
        "SUBAGENT_MAX_DEPTH.",
    )


def _children(default: Any = None) -> Any:
    return Field(
        default,
        ge=1,
        le=100,
        description="Sub-agents one run may spawn; null: the server's "
        "SUBAGENT_MAX_CHILDREN_PER_RUN.",
    )


def _exchanges(default: Any = None) -> Any:
    return Field(
        default,
        ge=1,
        le=100,
        description="`sessions_send` messages between two sessions per originating run; null: "
        "the server's AGENT_MESSAGE_MAX_EXCHANGES.",
    )


def _fallbacks(default: Any = None) -> Any:
    return Field(
        default,
        max_length=MAX_FALLBACK_MODELS,
        description="Models tried in order when `model` fails in a way another model can fix "
        "(provider down, rate limited, overloaded, model not found, context too long, key "
        "refused): the run goes on with the next one (docs/models.md, Fallback models). Names "
        "as for `model`, of any provider (`gemini-…`, `openai:…`, `offline`, `default`), each "
        "once; `[]`: none.",
        examples=[["openai:gpt-4o-mini", "offline"]],
    )


def _check_fallbacks(value: list[str] | None) -> list[str] | None:
    return None if value is None else list(check_fallback_models(value))


def _check_name(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or whitespace only")
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in value):
        raise ValueError("must not contain control characters")
    return value


def _check_prompt(value: str | None) -> str | None:
    # None reaches here only on create, where null means "omitted" (`AgentUpdate` refuses it first)
    return None if value is None else storable_text(value, blank_ok=True)


class AgentCreate(ApiModel):
    """A new agent of the caller's tenant (owned by the caller)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"name": "planner", "mode": "plan", "maxTurns": 6, "tokenBudget": 50000}]
        },
    )

    name: str = _name()
    model: str | None = _model()
    system_prompt: str | None = _prompt()
    max_turns: int | None = _turns()
    mode: AgentMode = _mode("chat")
    timeout_seconds: int | None = _timeout()
    token_budget: int | None = _budget()
    context_window: int | None = _window()
    if_busy: IfBusy = _if_busy("enqueue")
    max_spawn_depth: int | None = _spawn_depth()
    max_children_per_run: int | None = _children()
    max_exchanges: int | None = _exchanges()
    fallback_models: list[str] = _fallbacks([])

    _valid_name = field_validator("name")(_check_name)
    _valid_prompt = field_validator("system_prompt")(_check_prompt)
    _valid_fallbacks = field_validator("fallback_models")(_check_fallbacks)


class AgentUpdate(ApiModel):
    """Changes to an agent; omitted fields stay as they are. `timeoutSeconds`, `tokenBudget`,
    `contextWindow`, `maxSpawnDepth`, `maxChildrenPerRun` and `maxExchanges` may be null (back to
    the default / unlimited); other fields may not."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"mode": "chat"}]})

    name: str | None = _name(None)
    model: str | None = _model()
    system_prompt: str | None = _prompt()
    max_turns: int | None = _turns()
    mode: AgentMode | None = _mode(None)
    timeout_seconds: int | None = _timeout()
    token_budget: int | None = _budget()
    context_window: int | None = _window()
    if_busy: IfBusy | None = _if_busy()
    max_spawn_depth: int | None = _spawn_depth()
    max_children_per_run: int | None = _children()
    max_exchanges: int | None = _exchanges()
    fallback_models: list[str] | None = _fallbacks()

    @field_validator(
        "name",
        "model",
        "system_prompt",
        "max_turns",
        "mode",
        "if_busy",
        "fallback_models",
        mode="before",
    )
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        """Explicit nulls are refused where there is no "unset" value to go back to."""
        if value is None:
            raise ValueError("must not be null")
        return value

    _valid_name = field_validator("name")(_check_name)
    _valid_prompt = field_validator("system_prompt")(_check_prompt)
    _valid_fallbacks = field_validator("fallback_models")(_check_fallbacks)

    def changes(self) -> dict[str, Any]:
        """The fields the request sets (Python names), nulls included."""
        return {name: getattr(self, name) for name in self.model_fields_set}


class AgentOut(ApiModel):
    """An agent."""

    id: UUID
    name: str
    model: str
    system_prompt: str
    max_turns: int
    mode: AgentMode
    timeout_seconds: int | None = Field(description="null: the server's RUN_TIMEOUT_SECONDS.")
    token_budget: int | None = Field(description="null: unlimited.")
    context_window: int | None = Field(
        description="null: the model's known window, else the server's CONTEXT_WINDOW_TOKENS."
    )
    if_busy: IfBusy = Field(
        description="What a message posted to a busy session of this agent does by default."
    )
    max_spawn_depth: int | None = Field(description="null: the server's SUBAGENT_MAX_DEPTH.")
    max_children_per_run: int | None = Field(
        description="null: the server's SUBAGENT_MAX_CHILDREN_PER_RUN."
    )
    max_exchanges: int | None = Field(description="null: the server's AGENT_MESSAGE_MAX_EXCHANGES.")
    fallback_models: list[str] = Field(
        description="Models tried in order when `model` fails in a way another model can fix."
    )
    is_default: bool = Field(description="Runs posted without `agentId` use the default agent.")
    owner_user_id: str | None
    created_at: datetime
    updated_at: datetime


class AgentList(ApiModel):
    """The tenant's agents, the default agent first, then oldest first."""

    agents: list[AgentOut]
