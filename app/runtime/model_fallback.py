"""Which model a run's calls go to: the agent's, or the next of its `fallbackModels` once that one
has failed in a way another model can fix (the table is `app.llm.chain`).

* `start_models` resolves the agent's model when an attempt starts; if its provider is not
  configured here, the first fallback that is takes over (`model.fallback`, reason
  `model_unavailable`).
* `fall_back` is called with a failed call's error: a failure another model can fix moves the run
  to the next model of the list and the caller makes the call again, from the stored transcript
  (nothing of the failed call was stored); any other failure, or the end of the list, re-raises
  it. The move is streamed as `model.fallback {from, to, reason, message}`, after an
  `assistant.reset` when the failed call had streamed part of an answer, and counted
  (`agent_runtime_model_fallbacks_total`).
* `with_fallback` makes one call that way; `model_turn` (conversation turns, plan requests) and
  `side_calls` (compaction summaries, memory flushes) use it, so whichever call meets the outage
  first moves the whole run.

The run stays on the model it moved to for the rest of the attempt (the next model, not the
failed one, also answers later turns, summaries and flushes): the primary is not probed again
turn by turn. Each new run, and each new attempt of a run (a resumption after an approval or a
worker restart), starts on the agent's own model again.

A context too long for the model: the provider's `model_context_too_long` first gets one forced
compaction on the same model (`model_turn`) and falls back only if that cannot help; our own
`context_overflow` (it cannot fit even after compacting) falls back only to a model whose context
window is larger.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from app.config import Settings
from app.core.events import AssistantResetEvent, ModelFallbackEvent
from app.llm.base import Model, ModelError
from app.llm.chain import ModelChain, falls_back
from app.llm.registry import ModelRegistry
from app.llm.windows import known_context_window
from app.observability import metrics
from app.runtime.run_state import AgentConfig, ContextWindow, RunFailed, RunState

log = structlog.get_logger(__name__)

T = TypeVar("T")

CONTEXT_OVERFLOW = "context_overflow"
"""`compaction.CONTEXT_OVERFLOW` (not imported: compaction's side calls import this module)."""


def context_window_of(agent: AgentConfig, model: str, settings: Settings) -> ContextWindow:
    """The agent's window setting, else the (resolved) model's known window, else the server's
    default; minus the reserve for the answer."""
    window = agent.context_window or known_context_window(model) or settings.context_window_tokens
    return ContextWindow.of(window, settings.context_reserve_tokens)


def use_model(state: RunState, model: Model) -> None:
    """Send the run's next calls to `model`, with its context window (and a fresh calibration of
    the token estimate: another model counts tokens its own way)."""
    state.model = model
    state.window = context_window_of(state.agent, model.name, state.settings)
    state.token_ratio = 1.0


async def start_models(state: RunState, registry: ModelRegistry) -> None:
    """Resolve the agent's model (or, if it is not configured here, the first fallback that is)
    for this attempt; raises `ModelUnavailableError` when none is."""
    chain = ModelChain.of(registry, state.agent.model, state.agent.fallback_models)
    state.chain = chain
    model = chain.start()
    use_model(state, model)
    if chain.skipped:
        first = chain.skipped[0]
        await _announce(state, first.name, chain.current, first.error.code, first.error.message)


async def fall_back(state: RunState, failure: ModelError | RunFailed) -> None:
    """Move the run to its next model if `failure` is one another model can fix; else, or when
    no model is left, raise `failure` (naming the models tried, if there was more than one)."""
    chain = state.chain
    if chain is None:
        raise failure
    accept: Callable[[str], bool] | None = None
    if isinstance(failure, RunFailed):
        if failure.code != CONTEXT_OVERFLOW:
            raise failure
        accept = _larger_window(state)
    elif not falls_back(failure.code):
        raise _tried(chain, failure)
    previous = chain.current
    model = chain.advance(accept)
    if model is None:
        raise _tried(chain, failure)
    if isinstance(failure, ModelError) and failure.streamed:
        await state.leased.emit(AssistantResetEvent())
    use_model(state, model)
    await _announce(state, previous, chain.current, failure.code, failure.message)


async def with_fallback(state: RunState, call: Callable[[], Awaitable[T]]) -> T:
    """`call()`, made again on the next model each time it fails in a way `fall_back` takes."""
    while True:
        try:
            return await call()
        except ModelError as exc:
            await fall_back(state, exc)


def _larger_window(state: RunState) -> Callable[[str], bool]:
    """Accepts the models whose context window is larger than the current one's."""
    now = state.window.window
    return lambda name: context_window_of(state.agent, name, state.settings).window > now


async def _announce(state: RunState, previous: str, to: str, code: str, message: str) -> None:
    assert state.chain is not None
    for skipped in state.chain.skipped:
        if skipped.name != previous:
            log.warning("fallback model skipped", model=skipped.name, reason=skipped.error.message)
    log.warning(
        "model fallback", run_id=str(state.run_id), from_=previous, to=to, code=code, reason=message
    )
    metrics.count_model_fallback(previous, to, code)
    await state.leased.emit(ModelFallbackEvent(from_=previous, to=to, reason=code, message=message))


def _tried(chain: ModelChain, failure: ModelError | RunFailed) -> ModelError | RunFailed:
    """`failure`, its message naming the models tried when the run had moved along its list."""
    if chain.position <= 0:
        return failure
    tried = ", ".join(chain.names[: chain.position + 1])
    message = f"{failure.message} (models tried in order: {tried})"
    if isinstance(failure, RunFailed):
        return RunFailed(failure.code, message)
    return ModelError(failure.code, message)
