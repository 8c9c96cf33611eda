"""The run's inbox, runtime side: messages that reached a running run are delivered into its
transcript at the next model boundary, once.

A message for a run is a `run_inbox` row, written by whoever sends it, in the transaction that
causes it: the API for a user's message steered into a busy session (`ifBusy=steer`), the
run-ended trigger for a child's outcome or a reply to `sessions_send` (migration 0006). Before
each model call (`inject_arrivals`) the loop marks every undelivered row of its run delivered and
appends it to the transcript as a user message with its `source`, with one `message.injected`
event each, in one fenced transaction: it is in the transcript exactly once, or not yet.

A user's steering message also cuts the current turn short: before each tool call the loop asks
`steer_waiting`, and the calls not yet started get a stored result "skipped: new message" (so
every call keeps a result), then the message is injected and the model answers it. A message
that arrives after the run's last model call is not lost: when the run ends, the trigger turns
it into a follow-up run in the same lane (docs/multi-agent.md).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from app.core.events import InjectedSource, MessageInjectedEvent, RunEvent
from app.core.failpoints import INJECT_AFTER_COMMIT, INJECT_BEFORE_COMMIT, failpoint
from app.core.transcript import MessageSource, UserMessage
from app.runtime.run_state import RunState
from app.runtime.statements import DELIVER_INBOX, STEER_WAITING
from app.runtime.transcript_store import insert_messages

SKIPPED_FOR_MESSAGE = "skipped: a new message arrived before this call started"
"""The stored result of a tool call cut short by a user's steering message."""

_SOURCE_OF_KIND: dict[str, InjectedSource] = {
    "steer": "user",
    "subagent": "subagent",
    "reply": "agent",
}


def source_of(kind: str, from_run_id: UUID | str | None) -> MessageSource:
    """The transcript `source` of an inbox message of `kind` (`steer`, `subagent`, `reply`)."""
    return MessageSource(
        kind=_SOURCE_OF_KIND[kind], run_id=None if from_run_id is None else str(from_run_id)
    )


def follow_up_source(run_input: dict[str, Any]) -> MessageSource | None:
    """The `source` of a follow-up run's message (a message that reached a run after its last
    model call, queued as a run of its own by the run-ended trigger), else None."""
    follow_up = run_input.get("followUp")
    if not isinstance(follow_up, dict) or follow_up.get("kind") not in _SOURCE_OF_KIND:
        return None
    return source_of(follow_up["kind"], follow_up.get("sourceRunId"))


def sender_source(run_input: dict[str, Any]) -> MessageSource | None:
    """The `source` of a run's message posted by another session's agent (`sessions_send`:
    input `from`), else None."""
    sent_from = run_input.get("from")
    if not isinstance(sent_from, dict):
        return None
    run_id, session_key = sent_from.get("runId"), sent_from.get("sessionKey")
    return MessageSource(
        kind="agent",
        run_id=run_id if isinstance(run_id, str) else None,
        session_key=session_key if isinstance(session_key, str) else None,
    )


async def steer_waiting(state: RunState) -> bool:
    """Whether a user's message is waiting in the run's inbox (cheap: a partial index)."""
    run = state.leased.run
    async with state.leased.db.tenant(run.principal) as s:
        found = await s.scalar(STEER_WAITING, {"run_id": run.id})
    return bool(found)


async def inject_arrivals(state: RunState, *, skipped_calls: int = 0) -> int:
    """Deliver the run's undelivered inbox messages into its transcript, in arrival order;
    returns how many. `skipped_calls`: tool calls just skipped for a steering message (the
    first injected user message's event says so)."""
    leased = state.leased
    events: list[RunEvent] = []
    delivered: list[UserMessage] = []
    async with leased.write(events) as w:
        rows = (await w.session.execute(DELIVER_INBOX, {"run_id": leased.run.id})).all()
        if not rows:
            return 0
        skipped_told = False
        for row in sorted(rows, key=lambda r: r.id):
            message = UserMessage(text=row.text, source=source_of(row.kind, row.source_run_id))
            delivered.append(message)
            tell_skipped = row.kind == "steer" and not skipped_told
            skipped_told = skipped_told or tell_skipped
            events.append(
                MessageInjectedEvent(
                    source=_SOURCE_OF_KIND[row.kind],
                    text=row.text,
                    inbox_id=row.id,
                    from_run_id=row.source_run_id,
                    skipped_calls=skipped_calls if tell_skipped else 0,
                )
            )
        await insert_messages(w, delivered)
        failpoint(INJECT_BEFORE_COMMIT)
    failpoint(INJECT_AFTER_COMMIT)
    for message in delivered:
        state.record(message)
    return len(delivered)
