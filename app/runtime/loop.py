"""The agent loop: `execute_run`, the worker's entry point for one claimed run.

Phases, each in its own module and each storing what it did before the next starts:

1. preparation (`prepare_run`, here), all read in one transaction: the tenant's provider keys,
   the run's tools (policy, the tenant's tool sources), the agent's settings and limits, the
   model's context window, the session's latest compaction summary and the transcript after it,
   the run's clock (time since it first started, tokens used) and the tenant's token quota for
   the first call; the run's user message is appended once per run, not per attempt (with the
   run's next write: `LeasedRun.defer`);
2. resumption check (`RunState`): a stored final answer finishes the run; pending tool calls of
   the latest assistant message are executed before the model is called again;
3. chat mode (`conversation.converse`): model turns (`model_turn.run_model_turn`: context,
   streamed call, stored assistant message and usage) and tool executions
   (`tool_execution.execute_tool_calls`) until a final answer or `max_turns`;
   plan mode (`plan_mode.drive_plan`): a plan, then each step through the same turn loop;
4. finish `completed` or `failed`.

The state machine (`app.core.state_machine`, recorded by `run_state`) records every move as
`state.changed`; limits (`limits`) end the run with `max_turns_exceeded`, `run_timeout` or
`token_budget_exceeded`, the timeout interrupting whatever is in flight. Every model call's context is made to fit the model's window first
(`compaction`), or the run ends with `context_overflow`. A model that fails in a way another can
fix hands the run to the next of the agent's `fallbackModels` (`model_fallback`).

Cancellation is the worker's business: it cancels the task running `execute_run` and finishes
the run itself, so `CancelledError` (like `LeaseLostError`, and `AwaitingApproval`, which parks
the run) always propagates from here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
from pydantic import ValidationError

from app.config import Settings
from app.core.state_machine import COMPLETED, FAILED
from app.core.transcript import UserMessage
from app.db.models import Agent
from app.llm.base import ModelError
from app.llm.registry import ModelRegistry
from app.queue.lease import FencedWrite, LeasedRun, RowWrites
from app.runtime.agent_settings import AgentSettings
from app.runtime.compaction_store import SessionContext
from app.runtime.context import Summary
from app.runtime.conversation import converse
from app.runtime.inbox import follow_up_source, sender_source
from app.runtime.limits import (
    RunClock,
    check_tenant_budget,
    check_tokens,
    deadline_after,
    hard_deadline_first,
    within_deadline,
)
from app.runtime.model_fallback import start_models
from app.runtime.plan_mode import drive_plan, in_plan_mode
from app.runtime.run_state import AgentConfig, RunFailed, RunState
from app.runtime.statements import RUN_START
from app.runtime.tenant_models import TenantModels
from app.runtime.transcript_store import insert_messages, load_transcript
from app.tools.registry import ToolRegistry, default_tool_registry

log = structlog.get_logger(__name__)

AGENT_NOT_FOUND = "agent_not_found"
AGENT_INVALID = "agent_invalid"


async def execute_run(
    leased: LeasedRun,
    *,
    settings: Settings,
    models: ModelRegistry | TenantModels | None = None,
    tools: ToolRegistry | Callable[[], Awaitable[ToolRegistry]] | None = None,
) -> None:
    """Run the agent loop for `leased` to its end and finish the run completed or failed.

    `models`: a fixed registry, or `TenantModels` (the default) to use the run's tenant's own
    provider keys where it stores them (`tenant_models`). `tools`: the run's tools, or how to
    find them (read in the preparation's transaction).
    """
    models = models if models is not None else TenantModels(settings)
    log_ = log.bind(run_id=str(leased.run.id), attempt=leased.run.attempt)
    state: RunState | None = None
    try:
        # One transaction for every read of the preparation (`Database.sharing`).
        async with leased.db.sharing(leased.run.principal):
            registry = await models.for_run(leased) if isinstance(models, TenantModels) else models
            if tools is None:
                tools = default_tool_registry(settings)
            elif not isinstance(tools, ToolRegistry):
                tools = await tools()
            state = await prepare_run(leased, settings=settings, tools=tools)
            await check_tenant_budget(state)  # for the first model call
            state.budget_checked = True
        answer = await drive_in_time(state, registry)
    except ModelError as exc:
        failure = RunFailed(exc.code, exc.message)
    except RunFailed as exc:
        failure = exc
    else:
        assert state is not None
        await state.transition(COMPLETED)
        await leased.finish("completed", result={"text": answer})
        log_.info("run completed")
        return
    log_.info("run failed", code=failure.code, reason=failure.message)
    if state is not None:
        await state.transition(FAILED)
    await leased.finish("failed", error=failure.as_error())


async def prepare_run(leased: LeasedRun, *, settings: Settings, tools: ToolRegistry) -> RunState:
    """Load the agent, the stored transcript and the run's clock (without storing anything)."""
    async with leased.db.tenant(leased.run.principal) as s:
        agent = await s.get(Agent, leased.run.agent_id)
        if agent is None:
            raise RunFailed(AGENT_NOT_FOUND, f"agent {leased.run.agent_id} not found")
        try:
            extra = AgentSettings.of(agent.settings)
        except ValidationError as exc:
            raise RunFailed(
                AGENT_INVALID, f"agent {agent.id} has invalid settings: {exc}"
            ) from None
        config = AgentConfig(
            model=agent.model,
            system_prompt=agent.system_prompt or "",
            max_turns=agent.max_turns,
            mode=extra.mode,
            timeout_seconds=float(extra.timeout_seconds or settings.run_timeout_seconds),
            token_budget=extra.token_budget,
            context_window=extra.context_window,
            fallback_models=extra.fallback_models,
        )
    context, clock = await start_point(leased)
    summary = None
    if context.summary is not None:
        summary = Summary(context.summary, context.first_seq, context.last_seq)
    transcript = await load_transcript(leased, after_seq=context.last_seq)
    return RunState(
        leased=leased,
        settings=settings,
        agent=config,
        tools=tools,
        transcript=transcript,
        tokens_used=clock.tokens,
        deadline=deadline_after(clock.elapsed, config.timeout_seconds, clock.hard_left),
        hard_deadline=hard_deadline_first(clock, config.timeout_seconds),
        summary=summary,
        flushed_through=context.flushed_through,
    )


async def start_point(leased: LeasedRun) -> tuple[SessionContext, RunClock]:
    """The session's context (`compaction_store.session_context`) and the run's clock
    (`limits.run_clock`), in one statement."""
    async with leased.db.tenant(leased.run.principal) as s:
        row = (await s.execute(RUN_START, {"run_id": leased.run.id})).one()
    context = SessionContext(
        row.summary,
        row.first_message_seq or 0,
        row.last_message_seq or 0,
        row.flushed_through or 0,
    )
    hard_left = None if row.hard_left is None else float(row.hard_left)
    return context, RunClock(float(row.elapsed), int(row.tokens), hard_left)


async def drive_in_time(state: RunState, models: ModelRegistry) -> str:
    """`drive`, interrupted at the run's deadline (`run_timeout`)."""
    return await within_deadline(state, lambda: drive(state, models))


async def drive(state: RunState, models: ModelRegistry) -> str:
    """Chat or plan mode until the run's final answer; returns its text."""
    check_tokens(state)  # a resumed attempt of a run already over its budget
    plan_mode = in_plan_mode(state)
    if not plan_mode and (answer := state.final_answer()) is not None:
        return answer  # a previous attempt stored the answer, then died before finishing
    await start_models(state, models)
    if not state.own():
        run_input = state.leased.run.input
        question = UserMessage(
            text=str(run_input.get("message", "")),
            source=follow_up_source(run_input) or sender_source(run_input),
        )
        state.leased.defer(rows=_append_question(question))  # with the next write
        state.record(question)
    if plan_mode:
        return await drive_plan(state)
    return (await converse(state)).text


def _append_question(question: UserMessage) -> RowWrites:
    async def rows(w: FencedWrite) -> None:
        await insert_messages(w, [question])

    return rows
