"""Plan mode: the plan, its revisions, each step's status, and rejected plans."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.core.events.base import EventBase, PlanOutline, unset
from app.core.events.names import PLAN_CREATED, PLAN_INVALID, PLAN_STEP, PLAN_UPDATED


class PlanCreatedEvent(EventBase):
    """Plan mode: the run's plan."""

    type: Literal["plan.created"] = PLAN_CREATED
    plan: PlanOutline
    """The steps, all `pending`."""


class PlanUpdatedEvent(EventBase):
    """Plan mode: the plan was revised after a failed step."""

    type: Literal["plan.updated"] = PLAN_UPDATED
    plan: PlanOutline
    """All steps: the finished ones, the failed one, the replaced ones `skipped`, the new ones."""
    revision: int
    """1 for the first revision, 2, …"""
    reason: str | None
    """Why it was revised (the failed step)."""


class PlanStepEvent(EventBase):
    """Plan mode: a step's status changed."""

    type: Literal["plan.step"] = PLAN_STEP
    index: int
    """The step (1-based, stable across revisions)."""
    status: Literal["running", "done", "failed", "skipped"]
    """`running`, `done`, `failed` or `skipped`."""
    description: str | None = Field(default=None, exclude_if=unset)
    """What the step does (sent with `running`); omitted when unset."""
    reason: str | None = Field(default=None, exclude_if=unset)
    """Why the step failed (sent with `failed`); omitted when unset."""


class PlanInvalidEvent(EventBase):
    """Plan mode: the model's plan was rejected (asked again once, then the run fails)."""

    type: Literal["plan.invalid"] = PLAN_INVALID
    attempt: int
    """1 for the first plan request, 2 for the re-ask."""
    error: str
    """What is wrong with the plan (also sent back to the model)."""
