"""What every run event is made of: the camelCase, closed (`extra="forbid"`) pydantic base, the
envelope of a stored event (`runId`, `seq`, `ts`), and the small parts several events embed."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_camel

from app.core.transcript import PlanStep

IsoDatetime = Annotated[datetime, PlainSerializer(lambda v: v.isoformat(), return_type=str)]
"""A timestamp as `datetime.isoformat()` writes it (`+00:00`, not `Z`)."""


def unset(value: object) -> bool:
    """`exclude_if` of optional fields that are left out of the JSON when unset."""
    return value is None


class EventPart(BaseModel):
    """camelCase on the wire, undeclared fields refused, fields documented by their docstrings."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )


class EventBase(EventPart):
    """What every event has: the envelope of a stored event (unset on a new one).

    Events are not frozen: a tool event's `executionId` is filled in by the transaction that
    stores it (`LeasedRun.write` appends its events after its body).
    """

    run_id: UUID | None = Field(default=None, exclude_if=unset)
    """The run the event belongs to (set on stored events)."""
    seq: int | None = Field(default=None, exclude_if=unset)
    """The event's position in its run: 1, 2, … without gaps (the SSE `id`)."""
    ts: IsoDatetime | None = Field(default=None, exclude_if=unset)
    """When the event was stored."""


class EventError(EventPart):
    """What went wrong, machine-readably."""

    code: str
    """E.g. `model_error`, `context_overflow`, `cancelled`."""
    message: str
    """For humans."""


class PlanOutline(EventPart):
    """A plan's steps as events carry them (the transcript's `PlanStep`s)."""

    steps: list[PlanStep]
    """The steps in order, each with `index`, `description`, `tools` and `status`."""
