"""Per-run limits: model turns, wall-clock time, tokens. Each ends the run `failed` with its code.

* `max_turns_exceeded`: the agent's `maxTurns` model turns went by without a final answer (in plan
  mode: per step);
* `run_timeout`: the agent's `timeoutSeconds` (default `RUN_TIMEOUT_SECONDS`) passed since the run
  first started, or the run's own hard deadline (`deadline_at`: a sub-agent's `timeoutSeconds`,
  counted from its spawn) passed, whichever comes first. The clock is the run row's
  `started_at` as measured by the database, so a resumed attempt gets only what is left, and
  worker clocks do not matter. The deadline interrupts whatever is in flight (a model call, a
  tool); a run past its `deadline_at` while no worker holds it is failed by the workers' sweep
  (`app.queue.sweeps`);
* `token_budget_exceeded`: the run's input + output tokens (all attempts, as the providers
  report them) went over the agent's `tokenBudget`; checked after every model call;
* `quota_exceeded`: the tenant's model tokens of the UTC day reached its `tokensPerDay` quota
  (`app.tenants.quotas`); checked before every model call, so the call that went over is kept
  and the next one is not made.

A deadline is told apart from the worker's cancellation (user cancel, shutdown): only the
`asyncio.timeout` that expired turns into `run_timeout`; `CancelledError` always propagates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from app.runtime.run_state import RunFailed, RunState
from app.tenants.quotas import QuotaDefaults, token_budget_left

MAX_TURNS_EXCEEDED = "max_turns_exceeded"
RUN_TIMEOUT = "run_timeout"
TOKEN_BUDGET_EXCEEDED = "token_budget_exceeded"
QUOTA_EXCEEDED = "quota_exceeded"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RunClock:
    """A run's clock as the database measures it."""

    elapsed: float
    """Seconds since the run first started."""
    tokens: int
    """Input + output tokens used so far (all attempts)."""
    hard_left: float | None = None
    """Seconds until the run's `deadline_at` (negative: past it); None: it has none."""


def deadline_after(elapsed: float, timeout_seconds: float, hard_left: float | None = None) -> float:
    """The run's deadline in `loop.time()` terms, given how long it has been running: the
    agent's timeout or, if earlier, the run's hard deadline (`hard_left` seconds from now)."""
    now = asyncio.get_running_loop().time()
    deadline = now + timeout_seconds - elapsed
    return deadline if hard_left is None else min(deadline, now + hard_left)


def hard_deadline_first(clock: RunClock, timeout_seconds: float) -> bool:
    """Whether the run's `deadline_at` comes before the agent's timeout."""
    return clock.hard_left is not None and clock.hard_left < timeout_seconds - clock.elapsed


def turns_exceeded(state: RunState, *, step: int | None = None) -> RunFailed:
    """The failure of a run (or plan step) that used up its model turns."""
    limit = state.agent.max_turns
    if step is None:
        return RunFailed(
            MAX_TURNS_EXCEEDED, f"no final answer within the agent's limit of {limit} model turns"
        )
    return RunFailed(
        MAX_TURNS_EXCEEDED,
        f"step {step} of the plan got no final answer within the agent's limit of {limit} "
        "model turns (per step in plan mode)",
    )


def timed_out(state: RunState) -> RunFailed:
    """The failure of a run past its deadline."""
    if state.hard_deadline:
        return RunFailed(
            RUN_TIMEOUT, "the sub-agent did not finish within its timeoutSeconds (deadline_at)"
        )
    return RunFailed(
        RUN_TIMEOUT,
        f"the run did not finish within the agent's limit of {state.agent.timeout_seconds:g} "
        "seconds",
    )


def check_tokens(state: RunState) -> None:
    """Fail the run if its tokens went over the agent's budget."""
    budget = state.agent.token_budget
    if budget is not None and state.tokens_used > budget:
        raise RunFailed(
            TOKEN_BUDGET_EXCEEDED,
            f"the run used {state.tokens_used} tokens, over the agent's budget of {budget}",
        )


async def within_deadline(state: RunState, work: Callable[[], Awaitable[T]]) -> T:
    """Await `work()`, interrupted at the run's deadline (`run_timeout`).

    Only this deadline becomes `RunFailed`: a `TimeoutError` from inside `work` and the task's
    own cancellation propagate unchanged.
    """
    assert state.deadline is not None, "prepare_run sets the deadline"
    if asyncio.get_running_loop().time() >= state.deadline:
        raise timed_out(state)
    deadline = asyncio.timeout_at(state.deadline)
    try:
        async with deadline:
            return await work()
    except TimeoutError:
        if deadline.expired():
            raise timed_out(state) from None
        raise


async def check_tenant_budget(state: RunState) -> None:
    """Fail the run (`quota_exceeded`) if its tenant has used up its model tokens of the day.

    The first call's check is made in the run's preparation (`state.budget_checked`)."""
    if state.budget_checked:
        state.budget_checked = False
        return
    defaults = QuotaDefaults.from_settings(state.settings)
    leased = state.leased
    async with leased.db.tenant(leased.run.principal) as s:
        left = await token_budget_left(s, leased.run.tenant_id, defaults)
    if left is not None and left[0] >= left[1]:
        raise RunFailed(
            QUOTA_EXCEEDED,
            f"the tenant used {left[0]} model tokens today (UTC), its tokensPerDay quota is "
            f"{left[1]}",
        )
