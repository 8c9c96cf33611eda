"""Response bodies of the sub-agent routes (`GET /runs/{runId}/children`)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import Field

from app.api.schemas import ApiModel, RunError, RunResult


class ChildRun(ApiModel):
    """A spawned sub-agent's run, its outcome and its own children."""

    run_id: UUID
    session_key: str | None = Field(examples=["chat:42:sub:1a2b3c4d"])
    label: str | None
    task: str = Field(description="What it was asked to do (its user message).")
    status: str = Field(
        description="The run's status; once ended: `completed`, `failed`, `cancelled` or "
        "`timed_out`.",
        examples=["completed"],
    )
    agent_id: UUID | None
    result: RunResult | None = Field(description="`{text}`: its final answer, once completed.")
    error: RunError | None = Field(description="Why it did not complete.")
    created_at: datetime
    finished_at: datetime | None
    children: list[ChildRun] = Field(description="The sub-agents it spawned in turn.")


class RunChildren(ApiModel):
    """The tree of sub-agents a run spawned."""

    run_id: UUID
    children: list[ChildRun]
