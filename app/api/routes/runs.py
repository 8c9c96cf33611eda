"""Runs: enqueue a message, read a run's status and stored events, cancel it."""

from __future__ import annotations

from typing import Annotated, Any, cast
from uuid import UUID

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession

from app.api.deps import CurrentPrincipal, DatabaseDep, JsonBody, QueueDep, RunIdQuery
from app.api.errors import ApiError
from app.api.idempotency import (
    IdempotencyKeyHeader,
    answer_idempotently,
    idempotent_responses,
    json_answer,
)
from app.api.schemas import (
    MAX_SEQ,
    CancelResult,
    ChildSummary,
    ContextInfo,
    RunAccepted,
    RunError,
    RunEventsPage,
    RunRequest,
    RunResult,
    RunStatus,
    RunStatusName,
    Usage,
    busy_responses,
    error_responses,
    quota_responses,
)
from app.queue import event_log
from app.queue.idempotency import Answer
from app.queue.subagents import direct_children

router = APIRouter(prefix="/api/agent-runtime", tags=["runs"])


def run_not_found(run_id: UUID) -> ApiError:
    """The 404 for a run that is unknown or belongs to another tenant."""
    return ApiError(404, f"run {run_id} not found", field="runId")


@router.post(
    "",
    status_code=202,
    response_model=RunAccepted,
    responses={
        **error_responses(400, 401, 403, 404, 413, 415, 422),
        **busy_responses(),
        **quota_responses(),
        **idempotent_responses(202),
    },
)
async def create_run(
    principal: CurrentPrincipal,
    db: DatabaseDep,
    queue: QueueDep,
    _json: JsonBody,
    body: RunRequest,
    idempotency_key: IdempotencyKeyHeader = None,
) -> JSONResponse:
    """Queue a message in a session (a new session unless `sessionKey` is given); `ifBusy` says
    what it does when the session already has a live run."""

    async def enqueue(s: AsyncSession) -> Answer:
        enqueued = await queue.enqueue_in(
            s,
            principal,
            message=body.message,
            session_key=body.session_key,
            agent_id=body.agent_id,
            if_busy=body.if_busy,
            check_quotas=True,
        )
        accepted = RunAccepted(
            run_id=enqueued.run_id,
            session_key=enqueued.session_key,
            status=enqueued.status,
            merged=enqueued.merged if enqueued.status == "collected" else None,
        )
        return Answer(run_id=enqueued.run_id, status_code=202, body=_json_of(accepted))

    outcome = await answer_idempotently(
        db,
        principal,
        idempotency_key,
        operation="runs.create",
        body=_request_json(body),
        create=enqueue,
    )
    return json_answer(outcome)


def _json_of(model: BaseModel) -> dict[str, Any]:
    """The model as its wire JSON (camelCase; unset optional members left out)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _request_json(body: RunRequest) -> dict[str, Any]:
    """What an `Idempotency-Key` is bound to: the request as JSON (without `ifBusy` when it was
    not given, so a key stored before the field existed still matches its retry)."""
    unset = {"if_busy"} if body.if_busy is None else set()
    return body.model_dump(mode="json", by_alias=True, exclude=unset)


@router.get("/status", response_model=RunStatus, responses=error_responses(401, 404, 422))
async def run_status(
    principal: CurrentPrincipal, db: DatabaseDep, queue: QueueDep, run_id: RunIdQuery
) -> RunStatus:
    """A run's status, result or error, token usage, attempts and sub-agents."""
    found = await queue.run_status(principal, run_id)
    if found is None:
        raise run_not_found(run_id)
    run, session_key, session_tokens = found
    async with db.tenant(principal) as s:
        children = await direct_children(s, run_id)
    return RunStatus(
        run_id=run.id,
        session_key=session_key,
        status=cast(RunStatusName, run.status),
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        result=result_of(run.result),
        error=error_of(run.error),
        usage=Usage(
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            by_model=run.usage_by_model,
        ),
        state=run.state,
        attempts=run.attempts,
        context=ContextInfo(
            tokens=run.context_tokens,
            window=run.context_window,
            compactions=run.compactions,
            session_tokens=session_tokens,
        ),
        children=[
            ChildSummary(run_id=c.run_id, session_key=c.session_key, label=c.label, status=c.status)
            for c in children
        ],
    )


def result_of(result: dict[str, Any] | None) -> RunResult | None:
    """A stored run result as the API shows it."""
    if not isinstance(result, dict):
        return None
    text = result.get("text")
    return RunResult(text=text if isinstance(text, str) else "")


def error_of(error: dict[str, Any] | None) -> RunError | None:
    """A stored run error as the API shows it."""
    if not isinstance(error, dict):
        return None
    return RunError(code=str(error.get("code") or "error"), message=str(error.get("message") or ""))


@router.post(
    "/cancel", response_model=CancelResult, responses=error_responses(401, 403, 404, 409, 422)
)
async def cancel_run(
    principal: CurrentPrincipal, queue: QueueDep, run_id: RunIdQuery
) -> CancelResult:
    """Cancel a run: a queued or parked run at once; a running one is interrupted within 2 s
    (answered `running` while its worker stops it)."""
    status = await queue.cancel(principal, run_id)
    return CancelResult(run_id=run_id, status=cast(RunStatusName, status))


@router.get(
    "/runs/{runId}/events", response_model=RunEventsPage, responses=error_responses(401, 404, 422)
)
async def run_events(
    principal: CurrentPrincipal,
    db: DatabaseDep,
    run_id: Annotated[UUID, Path(alias="runId", description="The run's id.")],
    after_seq: Annotated[
        int,
        Query(alias="afterSeq", ge=0, le=MAX_SEQ, description="Only events with a greater seq."),
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many events.")] = 500,
) -> RunEventsPage:
    """A run's stored events, in order (for clients that poll instead of streaming)."""
    async with db.tenant(principal) as s:
        if await event_log.run_status(s, run_id) is None:
            raise run_not_found(run_id)
        events = await event_log.events_after(s, run_id, after_seq, limit=limit)
    return RunEventsPage(run_id=run_id, events=events)
