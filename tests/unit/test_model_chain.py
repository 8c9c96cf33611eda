"""Which failures fall back to the next model (from the provider's HTTP answer to the decision),
how an agent's model list is walked, and which fallback names an agent may store."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.llm.base import Model, ModelError, ModelEvent, ModelRequest
from app.llm.chain import FALLBACK_CODES, ModelChain, falls_back
from app.llm.failures import (
    BAD_REQUEST,
    MODEL_ERROR,
    SAFETY_BLOCK,
    TransientModelError,
    connection_failure,
    http_failure,
)
from app.llm.offline import OfflineModel
from app.llm.registry import MODEL_UNAVAILABLE, ModelRegistry, ModelUnavailableError
from app.runtime.agent_settings import AgentSettings, check_fallback_models


@pytest.mark.parametrize(
    ("status", "reason", "code", "fallback"),
    [
        (503, "The model is overloaded.", "model_unavailable_transient", True),
        (529, "Overloaded", "model_unavailable_transient", True),
        (500, "Internal error", "model_unavailable_transient", True),
        (408, "Request timeout", "model_unavailable_transient", True),
        (429, "Resource has been exhausted", "model_rate_limited", True),
        (404, "models/gemini-9 is not found", "model_not_found", True),
        (401, "Incorrect API key provided", "model_auth_failed", True),
        (403, "Permission denied", "model_auth_failed", True),
        (400, "API key not valid. Please pass a valid API key.", "model_auth_failed", True),
        (400, "This model's maximum context length is 8192 tokens", "model_context_too_long", True),
        (413, "Request entity too large", "model_context_too_long", True),
        (400, "Invalid JSON payload received.", BAD_REQUEST, False),
        (422, "tools[0].name: invalid", BAD_REQUEST, False),
        (409, "Conflict", BAD_REQUEST, False),
        (501, "Not implemented", MODEL_ERROR, False),
    ],
)
def test_an_http_failure_falls_back_when_another_model_can_fix_it(
    status: int, reason: str, code: str, fallback: bool
) -> None:
    failure = http_failure("P", status, reason)
    assert failure.code == code
    assert falls_back(failure.code) is fallback


def test_network_failures_safety_blocks_and_unknown_errors() -> None:
    refused = connection_failure("P", ConnectionRefusedError("refused"))
    assert isinstance(refused, TransientModelError) and falls_back(refused.code)
    assert falls_back(MODEL_UNAVAILABLE)  # a provider not configured here
    assert not falls_back(SAFETY_BLOCK)
    assert not falls_back(MODEL_ERROR)
    assert not falls_back("quota_exceeded")  # our limits are not a model's failure
    assert MODEL_ERROR not in FALLBACK_CODES


class Named(Model):
    """A model that never answers (only its name matters here)."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:  # pragma: no cover
        raise ModelError(MODEL_ERROR, "not called")
        yield


def registry() -> ModelRegistry:
    """`offline`, `openai:*` served; Gemini not configured."""
    models = ModelRegistry(default="openai:default-one")
    models.register("offline", OfflineModel)
    models.register_prefix("openai:", Named)
    models.hint("gemini-", "set GEMINI_API_KEY")
    return models


def test_the_chain_drops_duplicates_and_walks_in_order() -> None:
    chain = ModelChain.of(registry(), "openai:a", ["default", "openai:a", "offline", "openai:b"])
    assert chain.names == ["openai:a", "openai:default-one", "offline", "openai:b"]
    assert chain.start().name == "openai:a" and chain.current == "openai:a"
    assert chain.advance().name == "openai:default-one"  # type: ignore[union-attr]
    assert chain.advance(lambda name: name != "offline").name == "openai:b"  # type: ignore[union-attr]
    assert chain.advance() is None and chain.current == "openai:b"  # exhausted: stays


def test_models_not_configured_are_passed_over() -> None:
    chain = ModelChain.of(registry(), "gemini-2.5-flash", ["gemini-2.5-pro", "offline"])
    model = chain.start()
    assert model.name == "offline" and chain.current == "offline"
    assert [s.name for s in chain.skipped] == ["gemini-2.5-flash", "gemini-2.5-pro"]
    assert all(s.error.code == MODEL_UNAVAILABLE for s in chain.skipped)

    alone = ModelChain.of(registry(), "gemini-2.5-flash", ["gemini-2.5-pro"])
    with pytest.raises(ModelUnavailableError, match="gemini-2.5-flash"):
        alone.start()


@pytest.mark.parametrize(
    "names",
    [
        [],
        ["offline", "default", "gemini-2.5-pro", "models/gemini-2.5-flash", "openai:llama3.1:8b"],
        [f"openai:m{i}" for i in range(5)],
    ],
)
def test_fallback_names_an_agent_may_store(names: list[str]) -> None:
    assert list(check_fallback_models(names)) == names
    assert AgentSettings.of({"fallbackModels": names}).fallback_models == tuple(names)


@pytest.mark.parametrize(
    ("names", "says"),
    [
        (["gpt-4o"], "known provider"),
        (["gemini-"], "known provider"),
        (["openai:"], "known provider"),
        (["a b"], "is not a model name"),
        ([""], "is not a model name"),
        (["openai:" + "x" * 200], "is not a model name"),
        (["offline", "offline"], "listed twice"),
        ([f"openai:m{i}" for i in range(6)], "at most 5"),
    ],
)
def test_fallback_names_refused(names: list[str], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        check_fallback_models(names)
    with pytest.raises(ValueError, match=says):
        AgentSettings.of({"fallbackModels": names})
