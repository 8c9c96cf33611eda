"""The agent loop: `execute_run`, the worker's entry point for one claimed run.

Phases, each in its own module and each storing what it did before the next starts:

1. preparation (`prepare_run`, here): the agent's settings, the stored transcript, the run's
   user message (appended once per run, not per attempt);
2. resumption check (`RunState`): a stored final answer finishes the run; pending tool calls of
   the latest assistant message are executed before the model is called again;
3. model turn (`model_turn.run_model_turn`): context (`context.build_context`), streamed call,
   stored assistant message and usage;
4. tool execution (`tool_execution.execute_tool_calls`);
5. repeat 2–4 until a final answer or `max_turns`; finish `completed` or `failed`.

Cancellation is the worker's business: it cancels the task running `execute_run` and finishes
the run itself, so `CancelledError` (like `LeaseLostError`) always propagates from here.
"""

from __future__ import annotations

import structlog

from app.config import Settings
from app.db.models import Agent
from app.llm.base import ModelError
from app.llm.registry import ModelRegistry
from app.queue.lease import LeasedRun
from app.runtime.messages import UserMessage
from app.runtime.model_turn import run_model_turn
from app.runtime.state import AgentConfig, Entry, RunFailed, RunState
from app.runtime.tool_execution import execute_tool_calls
from app.tools.registry import ToolRegistry, default_tool_registry

log = structlog.get_logger(__name__)

MAX_TURNS_EXCEEDED = "max_turns_exceeded"
AGENT_NOT_FOUND = "agent_not_found"


async def execute_run(
    leased: LeasedRun,
    *,
    settings: Settings,
    models: ModelRegistry | None = None,
    tools: ToolRegistry | None = None,
) -> None:
    """Run the agent loop for `leased` to its end and finish the run completed or failed."""
    models = models if models is not None else ModelRegistry.from_settings(settings)
    tools = tools if tools is not None else default_tool_registry()
    log_ = log.bind(run_id=str(leased.run.id), attempt=leased.run.attempt)
    try:
        state = await prepare_run(leased, settings=settings, tools=tools)
        answer = await drive(state, models)
    except ModelError as exc:
        failure = RunFailed(exc.code, exc.message)
    except RunFailed as exc:
        failure = exc
    else:
        await leased.finish("completed", result={"text": answer})
        log_.info("run completed")
        return
    log_.info("run failed", code=failure.code, reason=failure.message)
    await leased.finish("failed", error=failure.as_error())


async def prepare_run(leased: LeasedRun, *, settings: Settings, tools: ToolRegistry) -> RunState:
    """Load the agent and the stored transcript (without storing anything yet)."""
    async with leased.db.tenant(leased.run.principal) as s:
        agent = await s.get(Agent, leased.run.agent_id)
        if agent is None:
            raise RunFailed(AGENT_NOT_FOUND, f"agent {leased.run.agent_id} not found")
        config = AgentConfig(
            model=agent.model, system_prompt=agent.system_prompt or "", max_turns=agent.max_turns
        )
    transcript = [Entry.stored(row) for row in await leased.load_transcript()]
    return RunState(
        leased=leased, settings=settings, agent=config, tools=tools, transcript=transcript
    )


async def drive(state: RunState, models: ModelRegistry) -> str:
    """Alternate model turns and tool executions until a final answer; returns its text."""
    if (answer := state.final_answer()) is not None:
        return answer  # a previous attempt stored the answer, then died before finishing
    state.model = models.resolve(state.agent.model)
    if not state.own():
        question = UserMessage(text=str(state.leased.run.input.get("message", "")))
        await state.leased.append([question])
        state.record(question)
    while True:
        if pending := state.pending_tool_calls():
            await execute_tool_calls(state, pending)
        if state.turns_used() >= state.agent.max_turns:
            raise RunFailed(
                MAX_TURNS_EXCEEDED,
                f"no final answer within the agent's limit of {state.agent.max_turns} model turns",
            )
        message = await run_model_turn(state)
        if not message.tool_calls:
            return message.text
