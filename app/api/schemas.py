"""Request and response bodies of the HTTP API (camelCase on the wire, with OpenAPI examples)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from app.core.events import RunEvent
from app.db.text import storable_text
from app.queue.busy import IfBusy

SESSION_KEY_PATTERN = r"^[A-Za-z0-9:_.-]+$"
MAX_MESSAGE_CHARS = 32_000
MAX_SEQ = 2**31 - 1  # event and message seqs are Postgres integers

RunStatusName = Literal[
    "queued", "running", "awaiting_approval", "waiting", "completed", "failed", "cancelled"
]

_RUN_ID = "7b0f2a64-4a8e-4f0e-9d61-2f3c7f0b9e11"
_TS = "2025-01-01T12:00:00Z"


class ApiModel(BaseModel):
    """camelCase aliases on the wire; Python names in code."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


# ------------------------------------------------------------------ errors


class ErrorDetail(ApiModel):
    """One validation problem."""

    field: str
    message: str
    type: str


class QuotaDetails(ApiModel):
    """Which quota a refused post went over (`quota_exceeded`)."""

    limit: Literal["runsPerMinute", "activeRuns", "queuedRuns", "tokensPerDay"]
    value: int = Field(description="The limit in force.")
    used: int = Field(description="What counts against it now.")


class ErrorInfo(ApiModel):
    """What went wrong."""

    code: str = Field(examples=["validation_error"])
    message: str = Field(examples=["message: String should have at least 1 character"])
    field: str | None = Field(default=None, examples=["message"])
    details: list[ErrorDetail] | QuotaDetails | None = Field(
        default=None,
        description="`validation_error`: each problem; `quota_exceeded`: the limit, its value "
        "and what is used.",
    )
    run_id: UUID | None = Field(default=None, description="`session_busy`: the session's live run.")


class ErrorResponse(ApiModel):
    """The body of every 4xx/5xx response."""

    error: ErrorInfo


# ------------------------------------------------------------------ runs


class RunRequest(ApiModel):
    """A message to run in a session."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"message": "Summarise notes/todo.md", "sessionKey": "chat:42"}]
        }
    )

    message: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS, description="The user's text.")
    session_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=SESSION_KEY_PATTERN,
        description="The session (lane) to run in; omitted: a new session is created.",
    )
    agent_id: UUID | None = Field(default=None, description="One of the tenant's agents.")
    if_busy: IfBusy | None = Field(
        default=None,
        description="What the message does when the session already has a queued, running or "
        "parked run: `enqueue` (a new run after it), `reject` (409 `session_busy`), `interrupt` "
        "(stop the live runs; this one runs next), `steer` (into the live run at its next "
        "model or tool boundary: 202 `steered`), `collect` (merged with the other messages "
        "arriving within the collect window into one queued run: 202 `collected`). Omitted: "
        "the agent's `ifBusy` setting (default `enqueue`).",
    )

    @field_validator("message")
    @classmethod
    def _storable_text(cls, value: str) -> str:
        """Postgres cannot store NUL or lone surrogates; blank text is no message."""
        return storable_text(value)


class RunAccepted(ApiModel):
    """Where the message went: its own queued run, or (`ifBusy`) a live or collecting run."""

    run_id: UUID = Field(
        examples=[_RUN_ID],
        description="`queued`: the message's own run; `steered`: the live run it was steered "
        "into; `collected`: the queued run collecting it with other messages.",
    )
    session_key: str = Field(examples=["chat:42"])
    status: Literal["queued", "steered", "collected"] = Field(
        default="queued",
        description="`queued`: a new run; `steered` (`ifBusy=steer`): added to the live run "
        "`runId`, read at its next model or tool boundary (or run after it, if it ends first); "
        "`collected` (`ifBusy=collect`): added to the collecting run `runId`.",
    )
    merged: bool | None = Field(
        default=None,
        description="Only with `collected`: true when the message joined a collecting run "
        "already queued, false when it started one.",
    )


class RunResult(ApiModel):
    """The final answer of a completed run."""

    text: str


class RunError(ApiModel):
    """Why a run failed."""

    code: str = Field(examples=["model_error"])
    message: str


class ModelUsage(ApiModel):
    """Tokens one model used in a run."""

    input_tokens: int
    output_tokens: int


class Usage(ApiModel):
    """Tokens used by the run's model calls."""

    input_tokens: int
    output_tokens: int
    by_model: dict[str, ModelUsage] = Field(
        default_factory=dict,
        description="The same tokens split by the model that used them (several when the run "
        "fell back to another of its agent's `fallbackModels`); empty before the first call.",
    )


class ContextInfo(ApiModel):
    """The run's context window and how full it is."""

    tokens: int | None = Field(
        description="Input tokens of the run's latest model call (as its provider reported "
        "them): the size of the context it sent; null before its first call."
    )
    window: int | None = Field(
        description="The context window (tokens) the run's calls were sized for; null before "
        "its first call."
    )
    compactions: int = Field(description="How often this run compacted its session's context.")
    session_tokens: int = Field(
        description="The whole session transcript, estimated (the sum of its messages' "
        "`tokenCount`); compaction keeps every message, so this only grows."
    )


class ChildSummary(ApiModel):
    """A sub-agent the run spawned (`sessions_spawn`)."""

    run_id: UUID = Field(examples=[_RUN_ID])
    session_key: str | None = Field(examples=["chat:42:sub:1a2b3c4d"])
    label: str | None = Field(examples=["researcher"])
    status: str = Field(
        description="The child run's status; once ended: `completed`, `failed`, `cancelled` or "
        "`timed_out`.",
        examples=["running"],
    )


class RunStatus(ApiModel):
    """A run's status, outcome and usage."""

    run_id: UUID = Field(examples=[_RUN_ID])
    session_key: str = Field(examples=["chat:42"])
    status: RunStatusName
    created_at: datetime = Field(examples=[_TS])
    started_at: datetime | None
    finished_at: datetime | None
    result: RunResult | None
    error: RunError | None
    usage: Usage
    state: str | None = Field(description="What the running loop is doing, if running.")
    attempts: int = Field(description="How many times a worker has claimed the run.")
    context: ContextInfo
    children: list[ChildSummary] = Field(
        default_factory=list,
        description="The sub-agents it spawned, in order (`GET /runs/{runId}/children` has "
        "their outcomes and their own children).",
    )


class CancelResult(ApiModel):
    """A run's status after a cancel request (`running` while a worker stops it)."""

    run_id: UUID = Field(examples=[_RUN_ID])
    status: RunStatusName = Field(examples=["cancelled"])


class RunEventsPage(ApiModel):
    """Stored events of a run (the same JSON objects as the SSE `data`)."""

    run_id: UUID
    events: list[RunEvent] = Field(
        description="The events in order: each is one of the `RunEvent` types "
        "(`app.core.events`), with its envelope `runId`, `seq`, `ts`.",
        examples=[
            [
                {
                    "runId": _RUN_ID,
                    "seq": 1,
                    "ts": "2025-01-01T12:00:00+00:00",
                    "type": "run.queued",
                    "sessionKey": "chat:42",
                    "status": "queued",
                }
            ]
        ],
    )


# ------------------------------------------------------------------ sessions


SessionVisibility = Literal["private", "tenant"]
"""Who may read a session besides its user and the tenant's admins."""


class SessionInfo(ApiModel):
    """A chat session of the tenant."""

    session_key: str = Field(examples=["chat:42"])
    agent_id: UUID
    title: str | None
    message_count: int
    created_at: datetime
    updated_at: datetime
    last_run_at: datetime | None
    token_count: int = Field(
        description="The whole transcript, estimated (the sum of its messages' `tokenCount`)."
    )
    context_tokens: int | None = Field(
        description="Input tokens of the session's latest model call, as its provider reported "
        "them (null before the first call)."
    )
    compactions: int = Field(description="How often the session's context was compacted.")
    parent_session_key: str | None = Field(
        description="The session whose run spawned this one as a sub-agent (`sessions_spawn`); "
        "null for a top-level session."
    )
    live_run_id: UUID | None = Field(
        description="The session's active run (running, parked awaiting an approval or waiting, "
        "else the first queued one); null when idle. Follow it with `GET /stream` to resume "
        "watching a run."
    )
    user_id: str = Field(description="The session's user (who may post to it).")
    visibility: SessionVisibility = Field(
        description="`private`: its user and the tenant's owners/admins only; `tenant`: every "
        "member may read it (read-only: only its user and admins post to it)."
    )


class SessionUpdate(ApiModel):
    """A change to a session (by its user or a tenant admin)."""

    model_config = ConfigDict(extra="forbid")

    visibility: SessionVisibility = Field(
        description="`tenant` shares the session (and its runs, events, approvals' outcomes and "
        "files) read-only with every member; `private` takes it back."
    )


class SessionPage(ApiModel):
    """A page of sessions, most recently active first."""

    sessions: list[SessionInfo]
    next_cursor: str | None = Field(
        description="Pass as `before` to get the next page; null on the last page."
    )


class MessageInfo(ApiModel):
    """One transcript entry (`payload` is a user/assistant/tool_result message)."""

    seq: int
    run_id: UUID | None
    role: str = Field(examples=["user"], description="user, assistant or tool.")
    created_at: datetime
    token_count: int | None = Field(
        description="Estimated tokens of the message in a model's context (characters / 4 of "
        "its JSON)."
    )
    payload: dict[str, Any] = Field(examples=[{"kind": "user", "text": "hi"}])


class CompactionInfo(ApiModel):
    """A compaction of a session's context: the summary that replaced a range of its messages."""

    id: UUID
    run_id: UUID | None
    summary: str
    first_seq: int = Field(description="The first transcript message the summary stands for.")
    last_seq: int = Field(description="The last one; later messages are sent as they are.")
    messages_covered: int = Field(description="Messages summarised by this compaction.")
    tokens_before: int = Field(description="Context tokens of the call that needed it.")
    tokens_after: int = Field(description="Estimated context tokens right after it.")
    summary_tokens: int
    model: str | None
    created_at: datetime


class CompactionList(ApiModel):
    """A session's compactions, newest first."""

    session_key: str
    compactions: list[CompactionInfo]


class MessagePage(ApiModel):
    """A session's transcript, in order."""

    session_key: str
    messages: list[MessageInfo]
    next_after_seq: int | None = Field(
        description="Pass as `afterSeq` to get the next page; null when there is no more."
    )


# ------------------------------------------------------------------ health


class Health(ApiModel):
    """Liveness."""

    status: Literal["ok"] = "ok"


class Readiness(ApiModel):
    """Readiness: the database answers and its schema is at the code's migration head.

    `sandbox` reports which isolation `run_python`/`run_shell` get here; it never makes the
    server not ready (with no usable sandbox those tools refuse, everything else works).
    """

    class SandboxIsolation(ApiModel):
        """How code execution is isolated on this server (`app/tools/sandbox/`)."""

        mode: Literal["bubblewrap", "unsafe-subprocess", "disabled", "unknown"] = Field(
            description="bubblewrap: a real sandbox; unsafe-subprocess: limits and a dropped "
            "uid but no isolation (explicit opt-in); disabled: code execution refuses (see "
            "`reason`); unknown: the probe has not finished yet or failed."
        )
        available: bool = Field(description="Whether run_python/run_shell can run code.")
        reason: str | None = Field(default=None, description="Why not, when not available.")
        userns: bool = Field(
            default=False, description="bubblewrap runs in a user namespace (else setuid mode)."
        )
        uid: int | None = Field(default=None, description="The host uid code runs as.")
        network: bool = Field(default=False, description="Sandboxes get the host's network.")
        bwrap: str | None = Field(default=None, description="The bubblewrap binary.")
        bwrap_version: str | None = None
        python: str | None = Field(default=None, description="The interpreter of run_python.")
        limits: dict[str, int] = Field(
            default_factory=dict,
            description="Per-call limits: timeoutSeconds, cpuSeconds, memoryMb, maxProcesses, "
            "maxFileMb, maxOpenFiles, tmpMb, outputMaxChars.",
        )

    status: Literal["ready", "not_ready"]
    database: Literal["ok", "unreachable"]
    migrations: Literal["current", "outdated", "missing", "unknown"]
    revision: str | None = Field(description="The database's migration revision.")
    expected_revision: str | None = Field(description="The code's migration head.")
    events: Literal["listening", "polling"] = Field(
        description="Whether SSE wake-ups come from LISTEN or only from polling."
    )
    error: ErrorInfo | None = Field(default=None, description="What is wrong, when not ready.")
    sandbox: Readiness.SandboxIsolation = Field(
        description="The code-execution isolation active here (informational: never makes the "
        "server not ready).",
        examples=[{"mode": "bubblewrap", "available": True, "userns": True, "network": False}],
    )


_BUSY_DESCRIPTION = (
    "`session_busy`: the session has a live run and the message was posted with `ifBusy=reject` "
    "(or its agent's `ifBusy` is `reject`); `error.runId` names the run. `conflict`: the "
    "`sessionKey` is another user's private session (choose another key)."
)
_ERROR_DESCRIPTIONS = {
    400: "Malformed JSON body.",
    401: "Missing, invalid or expired bearer token (or the server has no JWT secret).",
    403: "Not allowed for the caller's tenant role: `forbidden_role` (needs owner/admin), "
    "`read_only_session` (another user's shared session), `forbidden_approver` (the approval's "
    "rule names another approver or forbids self-approval).",
    404: "No such object for this tenant (another tenant's objects are 404 too).",
    409: "The request conflicts with the object's state.",
    413: "The request body is larger than 1 MiB.",
    415: "The body is not `application/json`.",
    422: "Invalid input; `error.field` names it and `error.details` lists every problem.",
    503: "Not ready.",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for error statuses (all share `ErrorResponse`)."""
    return {c: {"model": ErrorResponse, "description": _ERROR_DESCRIPTIONS[c]} for c in codes}


def quota_responses() -> dict[int | str, dict[str, Any]]:
    """The 429 of a route that creates runs: over one of the tenant's quotas."""
    return {
        429: {
            "model": ErrorResponse,
            "description": "`quota_exceeded`: a new run would go over one of the tenant's quotas "
            "(`details`: `limit`, `value`, `used`; docs/quotas.md).",
            "headers": {
                "Retry-After": {
                    "description": "Seconds until trying again makes sense.",
                    "schema": {"type": "integer"},
                }
            },
        }
    }


def busy_responses() -> dict[int | str, dict[str, Any]]:
    """The 409 of a route that posts a message (`ifBusy=reject`) and its 503 (the session stayed
    contended through every retry)."""
    return {
        409: {"model": ErrorResponse, "description": _BUSY_DESCRIPTION},
        503: {
            "model": ErrorResponse,
            "description": "`session_contended`: the session's runs stayed locked by workers "
            "through every retry; try again.",
        },
    }
