"""Plan mode's driver: ask for a plan, carry out its steps one at a time, revise it when a step
fails.

1. Planning (state `planning`): the model gets the context plus a plan request (not stored) and
   must answer with plan JSON (`ModelRequest.response_schema`, `purpose="plan"`); its text is not
   streamed. A malformed plan is re-asked once with the validation error (`plan.invalid` each
   time); a second malformed plan fails the run with `plan_invalid`. The valid plan is stored as
   an assistant message with `plan` set, with `plan.created`, in one transaction.
2. Steps, in order: the step's instruction is stored (a user message with `step` set) with
   `plan.step {status: running}`; then the ordinary turn loop (`converse`) runs, its turn limit
   counted from the instruction. The step's answer is stored together with `plan.step` `done`
   or `failed` (`planning.step_failure`), so a step's outcome is recorded exactly once.
3. A failed step: the model is asked for a revised plan (once per failure; at most
   `MAX_REVISIONS` per run, then the run fails with `plan_step_failed`). The revision keeps the
   finished steps, marks the failed one `failed` and the rest `skipped`, and appends the new
   steps (`plan.updated`, then `plan.step {status: skipped}` for each replaced step).
4. When no step is pending, the run's answer is the done steps' answers, in order.

Where to go on is read off the run's stored messages each time (`PlanProgress`), so a resumed
attempt continues the running step (pending tool calls first) or starts the next one; a
finished step is never run again. A plan request in flight when a worker died is asked again.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.core.events import (
    PlanCreatedEvent,
    PlanInvalidEvent,
    PlanStepEvent,
    PlanUpdatedEvent,
    RunEvent,
)
from app.core.state_machine import PLANNING
from app.core.transcript import AssistantMessage, Plan, PlanStep, UserMessage
from app.llm.base import Message, ModelRequest
from app.runtime.compaction import prepare_context
from app.runtime.conversation import converse
from app.runtime.model_turn import stream_turn
from app.runtime.plan_protocol import (
    MAX_REVISIONS,
    PlanInvalidError,
    PlanProgress,
    StepSpec,
    new_plan,
    parse_plan,
    plan_outline,
    plan_request,
    plan_schema,
    reask,
    render_plan,
    revised_plan,
    revision_request,
    step_failure,
    step_instruction,
)
from app.runtime.run_state import RunFailed, RunState
from app.runtime.transcript_store import append_messages
from app.runtime.usage import record_usage

PLAN_INVALID = "plan_invalid"
PLAN_STEP_FAILED = "plan_step_failed"
ASKS = 2
"""A plan request and its one re-ask."""


def in_plan_mode(state: RunState) -> bool:
    """Whether the run plans: it already stored a plan, or its agent plans and it has not
    started answering in chat mode (an agent switched mid-run keeps the run's mode)."""
    own = state.own()
    if any(isinstance(m, AssistantMessage) and m.plan is not None for m in own):
        return True
    return state.agent.mode == "plan" and not any(isinstance(m, AssistantMessage) for m in own)


async def drive_plan(state: RunState) -> str:
    """Carry the run's plan through (making it first if needed); returns the run's answer."""
    while True:
        progress = PlanProgress.of(state.own())
        if progress.plan is None:
            await state.transition(PLANNING)
            specs = state.tools.specs()
            instruction = plan_request(specs, plan_schema([t.name for t in specs]))
            plan = new_plan(await ask_for_plan(state, instruction))
            await store_plan(state, plan, [PlanCreatedEvent(plan=plan_outline(plan))])
        elif progress.running is not None:
            await run_step(state, progress.running, progress.running_since)
        elif progress.failed is not None:
            await revise(state, progress)
        elif (step := progress.next_step()) is not None:
            await start_step(state, step)
        else:
            return progress.result()


async def ask_for_plan(state: RunState, instruction: str) -> list[StepSpec]:
    """The model's plan for `instruction` (after the context), re-asked once if invalid."""
    names = [t.name for t in state.tools.specs()]
    schema = plan_schema(names)
    system_prompt = state.agent.system_prompt
    context = await prepare_context(
        state, system_prompt=system_prompt, extra=[UserMessage(text=instruction)]
    )
    messages: list[Message] = list(context.messages)
    for attempt in range(1, ASKS + 1):
        request = ModelRequest(
            system_prompt=system_prompt,
            messages=messages,
            response_schema=schema,
            purpose="plan",
        )
        turn = await stream_turn(state, request, stream_text=False)
        await record_usage(state, turn.usage, context_estimate=context.estimate)
        text = "".join(turn.text)
        try:
            if turn.calls:
                raise PlanInvalidError("the answer called tools; a plan is JSON text only")
            return parse_plan(text, names)
        except PlanInvalidError as exc:
            await state.leased.emit(PlanInvalidEvent(attempt=attempt, error=exc.message))
            if attempt == ASKS:
                raise RunFailed(
                    PLAN_INVALID,
                    f"the model did not produce a valid plan (asked {ASKS} times): {exc.message}",
                ) from None
            messages += [AssistantMessage(text=text), UserMessage(text=reask(exc.message))]
    raise AssertionError("unreachable")  # pragma: no cover


async def store_plan(state: RunState, plan: Plan, events: Sequence[RunEvent]) -> None:
    """Store a (first or revised) plan message with its events."""
    message = AssistantMessage(text=render_plan(plan), plan=plan)
    await append_messages(state.leased, [message], events=events)
    state.record(message)


async def start_step(state: RunState, step: PlanStep) -> None:
    """Store the step's instruction with `plan.step running`."""
    message = UserMessage(text=step_instruction(step), step=step.index)
    running = PlanStepEvent(index=step.index, status="running", description=step.description)
    await append_messages(state.leased, [message], events=[running])
    state.record(message)


async def run_step(state: RunState, index: int, since: int) -> None:
    """Turns until the step's answer, which is stored with the step's outcome event."""

    def outcome(message: AssistantMessage) -> list[RunEvent]:
        if message.tool_calls:
            return []
        reason = step_failure([*state.own()[since + 1 :], message])
        if reason is None:
            return [PlanStepEvent(index=index, status="done")]
        return [PlanStepEvent(index=index, status="failed", reason=reason)]

    await converse(state, since=since, step=index, extra_events=outcome)


async def revise(state: RunState, progress: PlanProgress) -> None:
    """Replace the remaining steps after a failed one with the model's revision."""
    assert progress.plan is not None and progress.failed is not None
    failed, reason = progress.failed, progress.failure
    if progress.plan.revision >= MAX_REVISIONS:
        raise RunFailed(
            PLAN_STEP_FAILED,
            f"step {failed} of the plan failed: {reason} (the plan was already revised "
            f"{progress.plan.revision} times)",
        )
    current = Plan(
        steps=[
            s.model_copy(update={"status": progress.statuses.get(s.index, s.status)})
            for s in progress.plan.steps
        ],
        revision=progress.plan.revision,
        reason=progress.plan.reason,
    )
    await state.transition(PLANNING)
    steps = await ask_for_plan(state, revision_request(current, failed, reason))
    plan = revised_plan(current, failed, f"step {failed} failed: {reason}", steps)
    skipped = [
        PlanStepEvent(index=s.index, status="skipped")
        for s, before in zip(plan.steps, current.steps, strict=False)
        if s.status == "skipped" and before.status != "skipped"
    ]
    updated = PlanUpdatedEvent(plan=plan_outline(plan), revision=plan.revision, reason=plan.reason)
    await store_plan(state, plan, [updated, *skipped])
