"""The retry policy, failure classification and provider registration (no network)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from app.config import Settings
from app.core.transcript import UserMessage
from app.llm.base import (
    ModelError,
    ModelEvent,
    ModelRequest,
    RetryNotice,
    StreamReset,
    TextDelta,
    ThinkingDelta,
    Usage,
)
from app.llm.failures import TransientModelError, http_failure, parse_retry_after, scrub
from app.llm.gemini import GeminiModel, thinks
from app.llm.offline import OfflineModel
from app.llm.openai_compat import OpenAIModel, parse_args
from app.llm.registry import ModelRegistry, ModelUnavailableError
from app.llm.retry import RetryPolicy, stream_with_retries

FAST = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.01)


def settings(**values: Any) -> Settings:
    """Settings from `values` only (no `.env`, provider variables cleared)."""
    blank: dict[str, Any] = {
        "gemini_api_key": None,
        "google_api_key": None,
        "google_genai_use_vertexai": False,
        "openai_api_key": None,
        "openai_base_url": None,
    }
    return Settings(_env_file=None, **{**blank, **values})


# ---------------------------------------------------------------------------- policy


def test_backoff_grows_and_is_capped() -> None:
    policy = RetryPolicy(max_retries=9, initial_delay=1.0, max_delay=5.0)
    for retry, low in [(1, 1.0), (2, 2.0), (3, 4.0)]:
        assert low <= policy.delay(retry) <= min(low + 1.0, 5.0)
    assert policy.delay(8) == 5.0


def test_retry_after_is_honoured_exactly_and_capped() -> None:
    policy = RetryPolicy(initial_delay=1.0, max_delay=5.0)
    assert policy.delay(1, retry_after=0.25) == 0.25
    assert policy.delay(3, retry_after=60) == 5.0
    assert policy.delay(1, retry_after=-3) == 0.0


def test_parse_retry_after() -> None:
    assert parse_retry_after({"retry-after": "7"}) == 7.0
    assert parse_retry_after({"retry-after": "0.5"}) == 0.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    now = time.time()
    date = format_datetime(datetime.fromtimestamp(now, UTC) + timedelta(seconds=30), usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=now) == pytest.approx(30, abs=1)
    past = format_datetime(datetime.fromtimestamp(now, UTC) - timedelta(hours=1), usegmt=True)
    assert parse_retry_after({"retry-after": past}, now=now) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None and parse_retry_after(None) is None


@pytest.mark.parametrize(
    ("status", "reason", "code", "transient"),
    [
        (429, "slow down", "model_rate_limited", True),
        (500, "oops", "model_unavailable_transient", True),
        (503, "overloaded", "model_unavailable_transient", True),
        (408, "timeout", "model_unavailable_transient", True),
        (400, "bad field", "model_bad_request", False),
        (422, "bad field", "model_bad_request", False),
        (
            400,
            "This model's maximum context length is 8192 tokens",
            "model_context_too_long",
            False,
        ),
        (413, "too big", "model_context_too_long", False),
        (400, "API key not valid. Please pass a valid API key.", "model_auth_failed", False),
        (401, "no key", "model_auth_failed", False),
        (403, "denied", "model_auth_failed", False),
        (404, "no such model", "model_not_found", False),
        (501, "not implemented", "model_error", False),
    ],
)
def test_http_failure(status: int, reason: str, code: str, transient: bool) -> None:
    failure = http_failure("P", status, reason)
    assert isinstance(failure, TransientModelError) is transient
    assert failure.code == code
    assert reason in str(failure) and str(status) in str(failure)


def test_scrub_hides_secrets() -> None:
    assert scrub("bad key sk-abcdefgh123", ["sk-abcdefgh123", None]) == "bad key ***"


def test_parse_args() -> None:
    assert parse_args("") == {} and parse_args('{"a": 1}') == {"a": 1}
    assert parse_args("[1]") == {"_raw": "[1]"} and parse_args("{oops") == {"_raw": "{oops"}


# ---------------------------------------------------------------------------- stream_with_retries


def scripted(
    *attempts: list[ModelEvent | Exception],
) -> tuple[list[int], Callable[[], AsyncIterator[ModelEvent]]]:
    """An attempt function playing `attempts` in turn (an exception item is raised)."""
    calls: list[int] = []

    async def attempt() -> AsyncIterator[ModelEvent]:
        calls.append(1)
        for item in attempts[len(calls) - 1]:
            if isinstance(item, Exception):
                raise item
            yield item

    return calls, attempt


async def collect(stream: AsyncIterator[ModelEvent]) -> list[ModelEvent]:
    return [e async for e in stream]


async def test_retry_without_output_needs_no_reset() -> None:
    calls, attempt = scripted(
        [TransientModelError("model_rate_limited", "429", retry_after=0.002)],
        [TextDelta("ok"), Usage(1, 1)],
    )
    events = await collect(stream_with_retries(attempt, FAST))
    assert events == [RetryNotice(1, 0.002, "429"), TextDelta("ok"), Usage(1, 1)]
    assert len(calls) == 2


async def test_retry_after_partial_output_resets_first() -> None:
    _, attempt = scripted(
        [ThinkingDelta("hm"), TextDelta("par"), TransientModelError("x", "cut")],
        [TextDelta("full")],
    )
    events = await collect(stream_with_retries(attempt, FAST))
    assert [type(e) for e in events] == [
        ThinkingDelta,
        TextDelta,
        StreamReset,
        RetryNotice,
        TextDelta,
    ]


async def test_retries_run_out() -> None:
    failure: list[ModelEvent | Exception] = [TransientModelError("model_rate_limited", "HTTP 429")]
    calls, attempt = scripted(failure, failure, failure)
    events: list[ModelEvent] = []
    with pytest.raises(ModelError) as info:
        async for event in stream_with_retries(attempt, FAST):
            events.append(event)
    assert info.value.code == "model_rate_limited"
    assert "HTTP 429" in info.value.message and "3 attempts" in info.value.message
    assert len(calls) == 3 and [e.attempt for e in events if isinstance(e, RetryNotice)] == [1, 2]


async def test_permanent_errors_are_not_retried() -> None:
    calls, attempt = scripted([ModelError("model_bad_request", "no")], [TextDelta("never")])
    with pytest.raises(ModelError, match="no"):
        await collect(stream_with_retries(attempt, FAST))
    assert len(calls) == 1


# ---------------------------------------------------------------------------- registry


def test_only_offline_without_provider_settings() -> None:
    registry = ModelRegistry.from_settings(settings())
    assert registry.names() == ["offline"]
    with pytest.raises(ModelUnavailableError) as gemini:
        registry.resolve("gemini-2.5-flash")
    assert "GEMINI_API_KEY" in gemini.value.message and "offline" in gemini.value.message
    with pytest.raises(ModelUnavailableError) as openai:
        registry.resolve("openai:gpt-4o-mini")
    assert "OPENAI_API_KEY" in openai.value.message and "OPENAI_BASE_URL" in openai.value.message
    with pytest.raises(ModelUnavailableError, match="not available"):
        registry.resolve("claude-9")


def test_providers_register_from_settings() -> None:
    registry = ModelRegistry.from_settings(
        settings(gemini_api_key="g-key-0123456789", openai_base_url="http://127.0.0.1:9/v1")
    )
    assert registry.names() == ["gemini-*", "models/gemini-*", "offline", "openai:*"]
    assert isinstance(registry.resolve("gemini-2.5-flash"), GeminiModel)
    assert isinstance(registry.resolve("models/gemini-2.5-pro"), GeminiModel)
    model = registry.resolve("openai:llama3.1:8b")
    assert isinstance(model, OpenAIModel) and model.model == "llama3.1:8b"
    with pytest.raises(ModelUnavailableError):
        registry.resolve("openai:")


def test_vertex_needs_project_and_location() -> None:
    half = settings(google_genai_use_vertexai=True, google_cloud_project="p")
    assert "gemini-*" not in ModelRegistry.from_settings(half).names()
    full = settings(
        google_genai_use_vertexai=True, google_cloud_project="p", google_cloud_location="global"
    )
    assert "gemini-*" in ModelRegistry.from_settings(full).names()


def test_default_is_the_default_model_setting() -> None:
    registry = ModelRegistry.from_settings(
        settings(default_model="openai:gpt-4o-mini", openai_api_key="sk-0123456789")
    )
    assert registry.resolve("default").name == "openai:gpt-4o-mini"
    assert registry.resolve(None) is registry.resolve("openai:gpt-4o-mini")
    assert isinstance(ModelRegistry.from_settings(settings()).resolve("default"), OfflineModel)
    unconfigured = ModelRegistry.from_settings(settings(default_model="gemini-2.5-flash"))
    with pytest.raises(ModelUnavailableError, match="GEMINI_API_KEY"):
        unconfigured.resolve("default")


def test_thinking_models() -> None:
    assert thinks("gemini-2.5-flash") and thinks("models/gemini-2.5-pro") and thinks("gemini-3-pro")
    assert not thinks("gemini-2.0-flash") and not thinks("gemini-1.5-pro")
    assert not thinks("gemini-exp-1206")


async def test_count_tokens_default_estimate() -> None:
    request = ModelRequest(system_prompt="x" * 40, messages=[UserMessage(text="hi")])
    estimate = await OfflineModel().count_tokens(request)
    assert estimate == -(-(40 + len('[{"kind": "user", "text": "hi"}]') + 2) // 4)
