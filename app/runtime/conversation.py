"""The turn loop shared by chat mode and each plan step: model turns and tool executions, in turn,
until the model answers without calling tools.

Pending calls of the latest assistant message run first (a resumed attempt finishes what the
last one started); a turn is taken only while the turn limit allows (`max_turns`, counted from
`since`: the run's start in chat mode, the step's instruction in plan mode). The state machine
moves `tool_calling` while calls run, `observing` once their results are in, and
`awaiting_approval` when a call must wait for a human (the `AwaitingApproval` signal then goes
on to the worker, which parks the run), `waiting` when a call waits for other runs
(`AwaitingArrival`: sub-agents, a reply). Before each model turn the messages that reached the
run meanwhile are injected (`inbox.inject_arrivals`).
"""

from __future__ import annotations

from app.core.state_machine import AWAITING_APPROVAL, OBSERVING, TOOL_CALLING, WAITING
from app.core.transcript import AssistantMessage, ToolCall
from app.runtime.inbox import inject_arrivals
from app.runtime.limits import turns_exceeded
from app.runtime.model_turn import ExtraEvents, run_model_turn
from app.runtime.run_state import RunState
from app.runtime.tool_execution import execute_tool_calls
from app.tools.approvals import AwaitingApproval
from app.tools.base import AwaitingArrival


async def converse(
    state: RunState,
    *,
    since: int = 0,
    step: int | None = None,
    extra_events: ExtraEvents | None = None,
) -> AssistantMessage:
    """Run turns until a final answer (an assistant message without tool calls); return it.

    `step`: the plan step being carried out (for the turn-limit message); `extra_events`: events
    stored with each turn's message (see `run_model_turn`).
    """
    while True:
        if pending := state.pending_tool_calls():
            await run_tools(state, pending)
        if state.turns_used(since) >= state.agent.max_turns:
            raise turns_exceeded(state, step=step)
        await inject_arrivals(state, skipped_calls=state.skipped_calls)
        state.skipped_calls = 0
        message = await run_model_turn(state, extra_events)
        if not message.tool_calls:
            return message


async def run_tools(state: RunState, calls: list[ToolCall]) -> None:
    """Execute `calls` (storing each result), moving the state machine along."""
    await state.transition(TOOL_CALLING)
    try:
        await execute_tool_calls(state, calls)
    except AwaitingApproval:
        await state.transition(AWAITING_APPROVAL)
        raise
    except AwaitingArrival:
        await state.transition(WAITING)
        raise
    await state.transition(OBSERVING)
