"""`run_agent`: post a message like `POST /api/agent-runtime` does, follow the run's events like
the SSE stream does (progress notifications), and answer with its final text.

* Posting is the REST path's own: `RunQueue.enqueue_in` with the tenant's quotas checked, in a
  tenant transaction (RLS; members may not post to another user's session), retried while the
  lane is contended; it records `run.created` with the request id like any post.
* Progress: first where the message went (`queued: run <id> in session <key>`, progress 0),
  then one `notifications/progress` per run start, state change, tool call and approval wait,
  and at most one per `DELTA_PROGRESS_SECONDS` while the answer is being written; its
  `progress` is the event's seq (increasing), its `message` says what happens. A client that
  asked for no progress (no `progressToken`) gets none.
* The wait is bounded by `MCP_RUN_WAIT_SECONDS`: a run still going then is left running and
  answered as an error naming its `runId` (`run_status` reads it later).
* A caller that goes away (it closes the request, or cancels it) abandoned the run: a run of its
  own (`queued`, not a message steered or collected into another run) is cancelled, as
  `POST /cancel` would. Nobody is left to read its answer, and it would go on spending tokens.
  An API process that stops while a call waits ends it the same way once its graceful shutdown
  (`SHUTDOWN_GRACE_SECONDS`) is over.
"""

from __future__ import annotations

import time
from uuid import UUID

import anyio
import structlog
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from pydantic import ValidationError

from app.api.mcp.caller import Caller
from app.api.mcp.schemas import RunAgentOutput, tool_result
from app.api.routes.runs import error_of, result_of
from app.api.run_feed import follow_run
from app.api.schemas import RunRequest, Usage
from app.core import events as ev
from app.core.errors import (
    ConflictError,
    ForbiddenError,
    NotFoundError,
    QuotaExceededError,
)
from app.queue.busy import LaneContendedError, retry_contended
from app.queue.manager import EnqueuedRun

log = structlog.get_logger(__name__)

DELTA_PROGRESS_SECONDS = 1.0
"""At most one progress notification per this many seconds about the answer being written."""
CANCEL_SECONDS = 5.0
"""How long cancelling an abandoned run may take before it is left to its run timeout."""
_PREVIEW_CHARS = 80


async def run_agent(
    caller: Caller,
    ctx: Context,
    message: str,
    session_key: str | None,
    agent_id: UUID | None,
) -> CallToolResult:
    """Enqueue `message`, wait for its run with progress, and answer with the outcome."""
    try:
        request = RunRequest(message=message, session_key=session_key, agent_id=agent_id)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "arguments"
        raise ToolError(f"{field}: {first['msg']}") from exc
    enqueued = await _enqueue(caller, request)
    log.info("mcp run_agent", run_id=str(enqueued.run_id), status=enqueued.status)
    wait = caller.runtime.settings.mcp_run_wait_seconds
    try:
        with anyio.fail_after(wait):
            # first, where the message went: a caller cut off later can still find the run
            note = f"{enqueued.status}: run {enqueued.run_id} in session {enqueued.session_key}"
            await ctx.report_progress(0, message=note)
            await _follow(caller, ctx, enqueued.run_id)
    except TimeoutError:
        pass  # answered below with the run's current status
    except anyio.get_cancelled_exc_class():
        # the caller closed the request (or cancelled it): nobody waits for this run any more
        if enqueued.status == "queued":
            await _abandon(caller, enqueued.run_id)
        raise
    return await _outcome(caller, enqueued, wait)


async def _enqueue(caller: Caller, request: RunRequest) -> EnqueuedRun:
    """Post the message as `POST /api/agent-runtime` does; refusals become tool errors."""
    runtime, principal = caller.runtime, caller.principal

    async def attempt() -> EnqueuedRun:
        async with runtime.db.tenant(principal) as s:
            return await runtime.queue.enqueue_in(
                s,
                principal,
                message=request.message,
                session_key=request.session_key,
                agent_id=request.agent_id,
                check_quotas=True,
            )

    try:
        return await retry_contended(attempt)
    except QuotaExceededError as exc:
        raise ToolError(
            f"{exc.message}; try again in {exc.retry_after} s (the tenant's limits and usage: "
            "GET /api/agent-runtime/usage)"
        ) from exc
    except (NotFoundError, ForbiddenError, ConflictError) as exc:
        raise ToolError(exc.message) from exc
    except LaneContendedError as exc:
        raise ToolError("the session's runs stayed locked by workers; try again") from exc


async def _follow(caller: Caller, ctx: Context, run_id: UUID) -> None:
    """Read the run's events until its terminal one, reporting progress on the way."""
    last_delta = 0.0
    written = ""
    async for event in follow_run(caller.runtime, caller.principal, run_id, 0):
        assert event.seq is not None  # stored events have their envelope
        if isinstance(event, ev.AssistantDeltaEvent):
            written += event.text
            if time.monotonic() - last_delta < DELTA_PROGRESS_SECONDS:
                continue
            last_delta = time.monotonic()
            note: str | None = "writing: " + written[-_PREVIEW_CHARS:]
        else:
            note = progress_note(event)
        if note is not None:
            await ctx.report_progress(event.seq, message=note)


def progress_note(event: ev.RunEvent) -> str | None:
    """What a progress notification says about `event` (None: not worth one)."""
    match event:
        case ev.RunStartedEvent() | ev.RunResumedEvent():
            return f"{event.type.removeprefix('run.')} (attempt {event.attempt})"
        case ev.StateChangedEvent():
            return f"state: {event.to}"
        case ev.ToolStartedEvent():
            return f"calling tool {event.name}"
        case ev.ToolFailedEvent():
            return f"tool {event.name} failed"
        case ev.ApprovalRequiredEvent():
            return f"waiting for approval of tool {event.tool} ({event.approval_id})"
        case ev.ModelRetryEvent():
            return f"model request failed ({event.reason}); retrying"
        case _:
            return None


async def _abandon(caller: Caller, run_id: UUID) -> None:
    """Cancel a run whose caller went away (shielded: the request is being cancelled)."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_SECONDS):
        try:
            status = await caller.runtime.queue.cancel(caller.principal, run_id)
        except (ConflictError, NotFoundError, ForbiddenError):
            return  # it finished meanwhile, or is not the caller's to cancel
        except Exception:
            log.exception("mcp run_agent: cancelling an abandoned run failed", run_id=str(run_id))
            return
        log.info("mcp run_agent abandoned: run cancelled", run_id=str(run_id), status=status)


async def _outcome(caller: Caller, enqueued: EnqueuedRun, wait: float) -> CallToolResult:
    """The run as `run_agent` answers it (an error result unless it completed)."""
    found = await caller.runtime.queue.run_status(caller.principal, enqueued.run_id)
    if found is None:  # deleted meanwhile: nothing to report but that
        raise ToolError(f"run {enqueued.run_id} is gone")
    run, session_key, _ = found
    result, error = result_of(run.result), error_of(run.error)
    output = RunAgentOutput(
        run_id=run.id,
        session_key=session_key,
        status=run.status,
        text=result.text if result is not None else None,
        error=error,
        usage=Usage(input_tokens=run.input_tokens, output_tokens=run.output_tokens),
    )
    if run.status == "completed":
        return tool_result(output, output.text or "")
    if run.status == "failed":
        reason = f"{error.code}: {error.message}" if error is not None else "no reason recorded"
        return tool_result(output, f"run {run.id} failed ({reason})", is_error=True)
    if run.status == "cancelled":
        return tool_result(output, f"run {run.id} was cancelled", is_error=True)
    return tool_result(
        output,
        f"run {run.id} is still {run.status} after {wait:g} s (MCP_RUN_WAIT_SECONDS); it goes "
        f'on: read its outcome later with run_status {{"runId": "{run.id}"}}',
        is_error=True,
    )
