"""Our one retry policy for model calls (the SDKs' own retries are switched off).

A provider implements one *attempt* as an async generator of `ModelEvent`s that raises
`TransientModelError` for failures worth retrying and `ModelError` for the rest;
`stream_with_retries` turns it into the model's stream:

* a transient failure is retried up to `max_retries` times. The wait is exponential backoff
  with jitter (tenacity's `wait_exponential_jitter`), or what the provider asked for in
  `Retry-After`; either is capped at `max_delay`;
* before waiting, a `RetryNotice(attempt, delay_seconds, reason)` is yielded, so the wait is
  visible to clients;
* if the failed attempt had already yielded text, thinking or tool calls, a `StreamReset()` comes
  first: the consumer drops that partial answer, and the next attempt streams a whole new one;
* when the retries run out, `ModelError(code, reason)` is raised with the failure's code
  (`model_rate_limited`, `model_unavailable_transient`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

import structlog
import tenacity

from app.config import Settings
from app.llm.base import (
    ModelError,
    ModelEvent,
    RetryNotice,
    StreamReset,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
)
from app.llm.failures import TransientModelError

log = structlog.get_logger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait before retrying a transient failure."""

    max_retries: int = 4
    initial_delay: float = 1.0
    """The first backoff; it doubles with each retry, plus up to this much random jitter."""
    max_delay: float = 30.0
    """No wait is longer, whatever the backoff or the provider's `Retry-After` says."""

    @classmethod
    def from_settings(cls, settings: Settings) -> RetryPolicy:
        """The policy from `MODEL_MAX_RETRIES` and the `MODEL_RETRY_*_SECONDS` settings."""
        return cls(
            max_retries=settings.model_max_retries,
            initial_delay=settings.model_retry_initial_delay_seconds,
            max_delay=settings.model_retry_max_delay_seconds,
        )

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number `retry` (1-based)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_delay)
        wait = tenacity.wait_exponential_jitter(
            initial=self.initial_delay, max=self.max_delay, jitter=self.initial_delay
        )
        state = tenacity.RetryCallState(tenacity.AsyncRetrying(), None, (), {})
        state.attempt_number = retry
        return min(float(wait(state)), self.max_delay)


_VISIBLE = (TextDelta, ThinkingDelta, ToolCallEvent)


async def stream_with_retries(
    attempt: Callable[[], AsyncIterator[ModelEvent]], policy: RetryPolicy
) -> AsyncIterator[ModelEvent]:
    """Run `attempt()` until one completes, retrying transient failures (see the module doc)."""
    retry = 0
    while True:
        visible = False
        try:
            async with closing(attempt()) as events:
                async for event in events:
                    visible = visible or isinstance(event, _VISIBLE)
                    yield event
            return
        except TransientModelError as failure:
            retry += 1
            if retry > policy.max_retries:
                raise ModelError(
                    failure.code, f"{failure.reason} (gave up after {retry} attempts)"
                ) from failure
            delay = policy.delay(retry, failure.retry_after)
            log.info("model call retried", attempt=retry, delay=delay, reason=failure.reason)
            if visible:
                yield StreamReset()
            yield RetryNotice(attempt=retry, delay_seconds=delay, reason=failure.reason)
            await asyncio.sleep(delay)


@asynccontextmanager
async def closing(stream: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[T]]:
    """Close `stream` (an async generator, or an SDK stream with `aclose`) however we leave it.

    Closing it closes the HTTP response under it, so an abandoned or cancelled call does not
    keep its connection open.
    """
    try:
        yield stream
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
