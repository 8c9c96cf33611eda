"""Token usage of a run's model calls: added to the run (and, for conversation calls, recorded as
the context's size) with a `usage` event, calibrating the context estimate, checked against the
run's token budget."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from app.core.events import UsageEvent
from app.db.models import AgentSession, Run
from app.llm.base import Usage
from app.queue.lease import LeasedRun
from app.runtime.limits import check_tokens
from app.runtime.run_state import RunState
from app.tenants.quotas import add_tokens

MIN_TOKEN_RATIO = 0.25
MAX_TOKEN_RATIO = 8.0


async def record_usage(
    state: RunState, usage: Usage | None, *, context_estimate: int | None = None
) -> None:
    """Add a call's usage to the run (with a `usage` event); fail the run over its budget.

    `context_estimate`: the call's input was the conversation's context, estimated at this many
    tokens; its reported input tokens become the run's and session's context size and calibrate
    later estimates (`RunState.token_ratio`).
    """
    if usage is None:
        return
    await add_usage(
        state.leased,
        usage.input_tokens,
        usage.output_tokens,
        context_window=state.window.window if context_estimate is not None else None,
    )
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
) -> None:
    """Add a model call's token usage to the run, with its `usage` event. With `context_window`,
    the call's input was the conversation's context, sized for that window: its input tokens are
    also the run's and session's current context size."""
    event = UsageEvent(input_tokens=input_tokens, output_tokens=output_tokens)
    async with leased.write([event]) as w:
        values: dict[str, Any] = {
            "input_tokens": Run.input_tokens + input_tokens,
            "output_tokens": Run.output_tokens + output_tokens,
        }
        if context_window is not None:
            values.update(context_tokens=input_tokens, context_window=context_window)
            await w.session.execute(
                update(AgentSession)
                .where(AgentSession.id == leased.run.session_id)
                .values(context_tokens=input_tokens)
            )
        await w.session.execute(update(Run).where(Run.id == leased.run.id).values(**values))
        await add_tokens(w.session, leased.run.tenant_id, input_tokens, output_tokens)
