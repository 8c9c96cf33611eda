"""Token usage of a run's model calls: added to the run (and, for conversation calls, recorded as
the context's size) with a `usage` event, calibrating the context estimate, checked against the
run's token budget.

The run keeps its totals (`input_tokens`, `output_tokens`) and the same tokens split by the model
that used them (`usage_by_model`, shown as `usage.byModel` in `/status`): a run that fell back to
another model (`model_fallback`) has one entry per model. The tenant's daily count
(`tenant_usage_daily`) adds every call's tokens, whichever model made it."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.events import UsageEvent
from app.llm.base import Usage
from app.queue.lease import FencedWrite, LeasedRun, RowWrites
from app.runtime.limits import check_tokens
from app.runtime.run_state import RunState
from app.runtime.statements import ADD_USAGE

MIN_TOKEN_RATIO = 0.25
MAX_TOKEN_RATIO = 8.0


@dataclass(frozen=True, slots=True)
class UsageWrite:
    """A call's usage as stored: its `usage` event and its rows (for a fenced write)."""

    event: UsageEvent
    rows: RowWrites


async def record_usage(
    state: RunState, usage: Usage | None, *, context_estimate: int | None = None
) -> None:
    """Add a call's usage to the run (with a `usage` event); fail the run over its budget.

    `context_estimate`: the call's input was the conversation's context, estimated at this many
    tokens; its reported input tokens become the run's and session's context size and calibrate
    later estimates (`RunState.token_ratio`).
    """
    write = usage_write(state, usage, context_estimate=context_estimate)
    if write is None:
        return
    async with state.leased.write([write.event]) as w:
        await write.rows(w)
    usage_stored(state, usage, context_estimate=context_estimate)


def usage_write(
    state: RunState, usage: Usage | None, *, context_estimate: int | None = None
) -> UsageWrite | None:
    """What `record_usage` stores, for a caller storing it with other rows (None: no usage)."""
    if usage is None:
        return None
    return usage_rows(
        state.leased,
        usage.input_tokens,
        usage.output_tokens,
        context_window=state.window.window if context_estimate is not None else None,
        model=state.model.name if state.model is not None else None,
    )


def usage_stored(
    state: RunState, usage: Usage | None, *, context_estimate: int | None = None
) -> None:
    """After a call's usage was stored: calibrate the estimates, count the run's tokens and fail
    the run over its budget."""
    if usage is None:
        return
    if context_estimate and usage.input_tokens > 0:
        ratio = usage.input_tokens / context_estimate
        state.token_ratio = min(MAX_TOKEN_RATIO, max(MIN_TOKEN_RATIO, ratio))
    state.tokens_used += usage.input_tokens + usage.output_tokens
    check_tokens(state)


async def add_usage(
    leased: LeasedRun,
    input_tokens: int,
    output_tokens: int,
    *,
    context_window: int | None = None,
    model: str | None = None,
) -> None:
    """Add a model call's token usage to the run, with its `usage` event (see `usage_rows`)."""
    write = usage_rows(
        leased, input_tokens, output_tokens, context_window=context_window, model=model
    )
    async with leased.write([write.event]) as w:
        await write.rows(w)


def usage_rows(
    leased: LeasedRun,
    input_tokens: int,
    output_tokens: int,
    *,
    context_window: int | None = None,
    model: str | None = None,
) -> UsageWrite:
    """A model call's token usage for the run, with its `usage` event. With `context_window`,
    the call's input was the conversation's context, sized for that window: its input tokens are
    also the run's and session's current context size. With `model`, the tokens are also added to
    that model's share (`usage_by_model`)."""
    event = UsageEvent(input_tokens=input_tokens, output_tokens=output_tokens, model=model)

    async def rows(w: FencedWrite) -> None:
        run = leased.run
        await w.session.execute(
            ADD_USAGE,
            {
                "run_id": run.id,
                "session_id": run.session_id,
                "tenant_id": run.tenant_id,
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "model": model,
                "context_window": context_window,
            },
        )

    return UsageWrite(event, rows)
