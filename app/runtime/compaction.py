"""The compaction phase: every model call's context is made to fit the model's context window.

Before each call (`prepare_context`) the context is measured: the estimate of `context`,
calibrated by the ratio of tokens the provider reported to tokens estimated on the run's latest
call, and, near the limit, the provider's own counter where it has one (Gemini). When it is over
the budget (window minus a reserve for the answer), the context is compacted:

1. a cut is chosen (`context.choose_cut`): the oldest messages go, the newest stay, as many as
   fit 40 % of the budget, and a tool call is never separated from its results;
2. `context.compacting` is streamed, and the model may first store durable notes with
   `memory_store` (`memory_flush`, once per stretch of transcript);
3. the cut-off part (with the previous summary) is summarised by the model, piece by piece if it
   does not fit one call (`summaries`), without tools and without streaming text to clients;
4. the snapshot (summary, covered rows, tokens before and after) is stored with
   `context.compacted` in one transaction; from then on contexts start with the summary.

The transcript keeps every row; a compaction only changes what is sent. Nothing is locked while
the model summarises (the run holds its lane, as it does during any call), so compacting one
session never holds up another.

When it goes wrong: a failed compaction (the model errs, or answers nothing) is streamed as
`context.compaction_failed`, stores nothing, and is not retried in the same attempt; the run goes
on while its context still fits the whole window and fails with `context_overflow` once it does
not. A context still over the budget after a compaction (the newest messages alone are too
large) fails the run with `context_overflow` at once, so no call is ever made with a context that
cannot fit, and compaction never loops. A provider that rejects a context as too long anyway
(`model_context_too_long`) gets one forced compaction and one retry (`model_turn`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import uuid4

import structlog

from app.core.events import (
    ContextCompactedEvent,
    ContextCompactingEvent,
    ContextCompactionFailedEvent,
    EventError,
)
from app.core.tokens import estimate_message_tokens, estimate_text_tokens
from app.core.transcript import UserMessage
from app.llm.base import Message, Model, ModelError, ModelRequest, ToolSpec
from app.observability import metrics
from app.runtime.compaction_store import Compaction, store_compaction
from app.runtime.context import (
    ContextItem,
    Summary,
    build_items,
    choose_cut,
    estimate_overhead_tokens,
)
from app.runtime.memory_flush import flush_memory
from app.runtime.run_state import RunFailed, RunState
from app.runtime.side_calls import collect
from app.runtime.summaries import (
    REQUEST_OVERHEAD_TOKENS,
    SUMMARY_SYSTEM_PROMPT,
    cap_summary,
    pieces,
    render_items,
    summary_limit,
    summary_request,
)

log = structlog.get_logger(__name__)

CONTEXT_OVERFLOW = "context_overflow"
COMPACTION_FAILED = "compaction_failed"
KEEP_FRACTION = 0.4
"""Most of the budget the kept (newest) messages may take after a compaction."""
COUNT_AT = 0.8
"""From this fraction of the budget on, the provider's token counter is asked (where it has one)."""
MIN_RESULT_CHARS = 1000
_LOGGED = {"from_seq", "to_seq", "messages", "tokens_before", "tokens_after", "summary_tokens"}


class CompactionError(Exception):
    """A compaction could not be made (the run may go on uncompacted while it fits)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class PreparedContext:
    """The messages of a call, their estimated tokens (to calibrate against the usage), and
    whether a compaction was stored to make them fit."""

    messages: list[Message]
    estimate: int
    tokens: int
    """The input tokens as best known (calibrated estimate, or the provider's count)."""
    compacted: bool = False


def context_items(state: RunState) -> list[ContextItem]:
    """The run's context as it stands: summary, newer rows, long tool results trimmed."""
    return build_items(
        state.transcript, summary=state.summary, max_result_chars=result_limit(state)
    )


def result_limit(state: RunState) -> int:
    """Most characters of one tool result sent to the model: the setting, and at most about a
    quarter of the budget."""
    return max(
        MIN_RESULT_CHARS,
        min(state.settings.context_tool_result_max_chars, state.window.budget),
    )


async def prepare_context(
    state: RunState,
    *,
    system_prompt: str,
    tools: Sequence[ToolSpec] = (),
    extra: Sequence[Message] = (),
    force: bool = False,
) -> PreparedContext:
    """The messages of the next call (the context, then `extra`), compacted first if needed.

    `force`: compact even if the estimate says it fits (the provider said it does not); the
    caller checks `compacted`. Raises `RunFailed(context_overflow)` when the call cannot fit.
    """
    overhead = estimate_overhead_tokens(system_prompt, tools)
    overhead += sum(estimate_message_tokens(m) for m in extra)

    async def prepared(items: list[ContextItem], compacted: bool = False) -> PreparedContext:
        messages = [*(i.message for i in items), *extra]
        request = ModelRequest(system_prompt=system_prompt, messages=messages, tools=tools)
        tokens, estimate = await measure_tokens(state, items, overhead, request)
        return PreparedContext(messages, estimate, tokens, compacted)

    items = context_items(state)
    before = await prepared(items)
    if not force and before.tokens <= state.window.budget:
        return before
    failure = None
    if not state.compaction_failed:
        # Forced: the provider refused this size, so the budget is below it, whatever we think.
        target = before.tokens if force else None
        try:
            if await compact(state, items, overhead, before.tokens, target=target):
                metrics.count_compaction(forced=force)
                after = await prepared(context_items(state), compacted=True)
                if after.tokens > state.window.budget:
                    raise overflow(state, after.tokens, overhead, after_compaction=True)
                return after
        except (CompactionError, ModelError) as exc:
            failure = exc.message
            await _failed(state, exc)
    if not force and before.tokens > state.window.window:
        raise overflow(state, before.tokens, overhead, after_compaction=False, failure=failure)
    return before  # over the budget but within the window: the call goes ahead uncompacted


async def measure_tokens(
    state: RunState, items: Sequence[ContextItem], overhead: int, request: ModelRequest
) -> tuple[int, int]:
    """The call's input tokens as best known, and the plain estimate behind them."""
    estimate = overhead + sum(i.tokens for i in items)
    calibrated = math.ceil(estimate * state.token_ratio)
    model = state.model
    if model is None or calibrated < COUNT_AT * state.window.budget or not has_counter(model):
        return calibrated, estimate
    try:
        return await model.count_tokens(request), estimate
    except ModelError as exc:
        log.warning("token count failed; using the estimate", error=exc.message)
        return calibrated, estimate


def has_counter(model: Model) -> bool:
    """Whether the model counts tokens itself (else `count_tokens` is only the estimate)."""
    return type(model).count_tokens is not Model.count_tokens


def overflow(
    state: RunState,
    tokens: int,
    overhead: int,
    *,
    after_compaction: bool,
    failure: str | None = None,
) -> RunFailed:
    """The failure of a run whose next call cannot fit its model's context window."""
    window = state.window
    if after_compaction:
        why = (
            "even after compacting older messages; the newest messages alone are too large "
            f"(the system prompt and tool definitions take about {overhead})"
        )
    elif failure is not None:
        why = f"and compacting older messages failed: {failure}"
    else:
        why = "and there are no older messages left to compact"
    return RunFailed(
        CONTEXT_OVERFLOW,
        f"the next model call needs about {tokens} tokens, more than the context window allows "
        f"({window.window} tokens, {window.reserve} of them kept for the answer), {why}",
    )


async def _failed(state: RunState, exc: CompactionError | ModelError) -> None:
    state.compaction_failed = True
    code = exc.code if isinstance(exc, ModelError) else COMPACTION_FAILED
    log.warning("compaction failed", run_id=str(state.run_id), code=code, reason=exc.message)
    error = EventError(code=code, message=exc.message)
    await state.leased.emit(ContextCompactionFailedEvent(error=error))


async def compact(
    state: RunState,
    items: list[ContextItem],
    overhead: int,
    tokens_before: int,
    *,
    target: int | None = None,
) -> bool:
    """Summarise the oldest part of `items` and store the snapshot; False: nothing to cut.

    `target`: a size the context must get well below (the provider refused it), if smaller than
    the budget.
    """
    window = state.window
    budget = min(window.budget, target) if target is not None else window.budget
    limit = summary_limit(budget)
    keep = min(int(budget * KEEP_FRACTION), budget - overhead - limit)
    cut = choose_cut(items, max(0, int(keep / state.token_ratio)))
    if cut is None:
        return False
    covered, kept = items[:cut], items[cut:]
    first = state.summary.first_seq if state.summary is not None else covered[0].seq
    last = covered[-1].seq
    messages = sum(not i.summary for i in covered)
    await state.leased.emit(
        ContextCompactingEvent(
            from_seq=first,
            to_seq=last,
            messages=messages,
            tokens_before=tokens_before,
            budget=window.budget,
            window=window.window,
        )
    )
    await flush_memory(state, covered, last)
    text = await summarize(state, covered, limit)
    summary = Summary(text=text, first_seq=first, last_seq=last)
    summary_tokens = estimate_text_tokens(summary.message().text)
    after = math.ceil((overhead + summary_tokens + sum(i.tokens for i in kept)) * state.token_ratio)
    assert state.model is not None
    compaction = Compaction(
        id=uuid4(),
        summary=text,
        first_seq=first,
        last_seq=last,
        messages_covered=messages,
        tokens_before=tokens_before,
        tokens_after=after,
        summary_tokens=summary_tokens,
        model=state.model.name,
    )
    compacted = ContextCompactedEvent(
        snapshot_id=compaction.id,
        from_seq=first,
        to_seq=last,
        messages=messages,
        tokens_before=tokens_before,
        tokens_after=after,
        summary_tokens=summary_tokens,
    )
    await store_compaction(state.leased, compaction, compacted)
    state.summary = summary
    logged = compacted.model_dump(by_alias=True, include=_LOGGED)
    log.info("context compacted", run_id=str(state.run_id), **logged)
    return True


async def summarize(state: RunState, covered: Sequence[ContextItem], limit: int) -> str:
    """The model's summary of `covered` (its previous summary included), made piece by piece."""
    previous, blocks = render_items(covered)
    budget = int(state.window.budget / state.token_ratio)
    room = budget - REQUEST_OVERHEAD_TOKENS - 2 * limit
    summary = previous
    for group in pieces(blocks, max(room, 128)):
        request = ModelRequest(
            system_prompt=SUMMARY_SYSTEM_PROMPT,
            messages=[UserMessage(text=summary_request(summary, group, limit))],
            purpose="compact",
        )
        answer = await collect(state, request)
        if not answer.text.strip():
            raise CompactionError("the model answered the summary request with no text")
        summary = cap_summary(answer.text, limit)
    if summary is None:
        raise CompactionError("there was nothing to summarise")
    return summary
