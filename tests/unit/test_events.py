"""The run event union: names, wire format (as clients saw it before the union), strictness, and
the OpenAPI document."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, get_args
from uuid import UUID

import pytest
from pydantic import ValidationError

from app.core import events as ev
from app.core.events import names
from app.core.transcript import PlanStep, ToolCall

RUN = UUID("7b0f2a64-4a8e-4f0e-9d61-2f3c7f0b9e11")
ID = UUID("0b7e1f0a-95d4-4c63-8f5e-3a0b6f3e2d11")
TS = datetime(2025, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)


def test_each_class_is_named_by_its_type_literal() -> None:
    constants = {v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)}
    assert constants == set(ev.EVENT_TYPES)
    assert len(ev.EVENT_TYPES) == len(set(ev.EVENT_TYPES)) == 32
    for cls in ev.EVENT_CLASSES:
        field = cls.model_fields["type"]
        assert field.annotation is not None and get_args(field.annotation) == (field.default,)
    assert {"run.completed", "run.failed", "run.cancelled"} == ev.TERMINAL_EVENTS


def test_every_field_is_documented() -> None:
    for cls in ev.EVENT_CLASSES:
        assert cls.__doc__, cls.__name__
        for name, field in cls.model_fields.items():
            assert name == "type" or field.description, f"{cls.__name__}.{name}"


# The `data` each event was stored with before the union existed (built by hand then).
STORED: list[tuple[ev.RunEvent, dict[str, Any]]] = [
    (ev.RunQueuedEvent(session_key="s_1"), {"sessionKey": "s_1", "status": "queued"}),
    (ev.RunStartedEvent(attempt=1, worker_id="h:1:x"), {"attempt": 1, "workerId": "h:1:x"}),
    (ev.RunResumedEvent(attempt=2, worker_id="w"), {"attempt": 2, "workerId": "w"}),
    (ev.RunRequeuedEvent(attempt=1), {"attempt": 1}),
    (ev.AssistantDeltaEvent(text="a"), {"text": "a"}),
    (ev.ThinkingDeltaEvent(text="t"), {"text": "t"}),
    (ev.AssistantResetEvent(), {}),
    (
        ev.ModelRetryEvent(attempt=1, delay_seconds=0.5, reason="429"),
        {"attempt": 1, "delaySeconds": 0.5, "reason": "429"},
    ),
    (
        ev.ModelFallbackEvent(
            from_="gemini-2.5-flash",
            to="openai:gpt-4o-mini",
            reason="model_rate_limited",
            message="429",
        ),
        {
            "from": "gemini-2.5-flash",
            "to": "openai:gpt-4o-mini",
            "reason": "model_rate_limited",
            "message": "429",
        },
    ),
    (
        ev.AssistantMessageEvent(text="", tool_calls=[ToolCall(id="c", name="n", args={"a": 1})]),
        {"text": "", "toolCalls": [{"id": "c", "name": "n", "args": {"a": 1}}]},
    ),
    (
        ev.ToolStartedEvent(tool_call_id="c", name="n", args={}, execution_id=ID),
        {"toolCallId": "c", "name": "n", "args": {}, "executionId": str(ID)},
    ),
    (
        ev.ToolStartedEvent(tool_call_id="c", name="n", args={}, purpose="memory_flush"),
        {"toolCallId": "c", "name": "n", "args": {}, "purpose": "memory_flush"},
    ),
    (
        ev.ToolCompletedEvent(tool_call_id="c", name="n", result=None, execution_id=ID),
        {"toolCallId": "c", "name": "n", "result": None, "executionId": str(ID)},
    ),
    (
        ev.ToolFailedEvent(tool_call_id="c", name="n", error=None),
        {"toolCallId": "c", "name": "n", "error": None},
    ),
    (ev.UsageEvent(input_tokens=1, output_tokens=2), {"inputTokens": 1, "outputTokens": 2}),
    (
        ev.UsageEvent(input_tokens=1, output_tokens=2, model="offline"),
        {"inputTokens": 1, "outputTokens": 2, "model": "offline"},
    ),
    (ev.StateChangedEvent(from_="queued", to="thinking"), {"from": "queued", "to": "thinking"}),
    (
        ev.ApprovalRequiredEvent(
            approval_id=ID,
            tool_call_id="c",
            tool="run_shell",
            args={"command": "ls"},
            risk="high",
            reason="high-risk tool",
            expires_at=TS,
        ),
        {
            "approvalId": str(ID),
            "toolCallId": "c",
            "tool": "run_shell",
            "args": {"command": "ls"},
            "risk": "high",
            "reason": "high-risk tool",
            "expiresAt": TS.isoformat(),
        },
    ),
    (
        ev.ApprovalResolvedEvent(approval_id=ID, decision="expired", decided_by=None),
        {"approvalId": str(ID), "decision": "expired", "decidedBy": None},
    ),
    (
        ev.ApprovalResolvedEvent(
            approval_id=ID, decision="approve", decided_by="u", reason="ok", trust_seconds=60
        ),
        {
            "approvalId": str(ID),
            "decision": "approve",
            "decidedBy": "u",
            "reason": "ok",
            "trustSeconds": 60,
        },
    ),
    (
        ev.PlanCreatedEvent(plan=ev.PlanOutline(steps=[PlanStep(index=1, description="d")])),
        {"plan": {"steps": [{"index": 1, "description": "d", "tools": [], "status": "pending"}]}},
    ),
    (
        ev.PlanUpdatedEvent(plan=ev.PlanOutline(steps=[]), revision=1, reason="step 1 failed"),
        {"plan": {"steps": []}, "revision": 1, "reason": "step 1 failed"},
    ),
    (
        ev.PlanStepEvent(index=1, status="running", description="d"),
        {"index": 1, "status": "running", "description": "d"},
    ),
    (ev.PlanStepEvent(index=1, status="done"), {"index": 1, "status": "done"}),
    (
        ev.PlanStepEvent(index=2, status="failed", reason="r"),
        {"index": 2, "status": "failed", "reason": "r"},
    ),
    (ev.PlanInvalidEvent(attempt=1, error="e"), {"attempt": 1, "error": "e"}),
    (
        ev.ContextCompactingEvent(
            from_seq=1, to_seq=4, messages=4, tokens_before=900, budget=800, window=1000
        ),
        {
            "fromSeq": 1,
            "toSeq": 4,
            "messages": 4,
            "tokensBefore": 900,
            "budget": 800,
            "window": 1000,
        },
    ),
    (
        ev.ContextCompactedEvent(
            snapshot_id=ID,
            from_seq=1,
            to_seq=4,
            messages=4,
            tokens_before=900,
            tokens_after=300,
            summary_tokens=50,
        ),
        {
            "snapshotId": str(ID),
            "fromSeq": 1,
            "toSeq": 4,
            "messages": 4,
            "tokensBefore": 900,
            "tokensAfter": 300,
            "summaryTokens": 50,
        },
    ),
    (
        ev.ContextCompactionFailedEvent(error=ev.EventError(code="c", message="m")),
        {"error": {"code": "c", "message": "m"}},
    ),
    (
        ev.MemoryFlushedEvent(through_seq=4, stored=1, failed=0),
        {"throughSeq": 4, "stored": 1, "failed": 0},
    ),
    (
        ev.MemoryFlushedEvent(
            through_seq=4, error=ev.EventError(code="c", message="m"), stored=0, failed=0
        ),
        {"throughSeq": 4, "error": {"code": "c", "message": "m"}, "stored": 0, "failed": 0},
    ),
    (ev.RunCompletedEvent(result={"text": "42"}), {"result": {"text": "42"}}),
    (ev.RunCompletedEvent(result=None), {"result": None}),
    (
        ev.RunFailedEvent(error=ev.EventError(code="x", message="y")),
        {"error": {"code": "x", "message": "y"}},
    ),
    (ev.RunCancelledEvent(reason="cancelled"), {"reason": "cancelled"}),
    (
        ev.SubagentSpawnedEvent(
            child_run_id=RUN, child_session_key="s_1:sub:ab12", task="t", agent_id=RUN
        ),
        {
            "childRunId": str(RUN),
            "childSessionKey": "s_1:sub:ab12",
            "task": "t",
            "agentId": str(RUN),
        },
    ),
    (
        ev.SubagentCompletedEvent(child_run_id=RUN, status="completed", result={"text": "hi"}),
        {"childRunId": str(RUN), "status": "completed", "result": {"text": "hi"}},
    ),
    (
        ev.MessageInjectedEvent(source="user", text="stop", inbox_id=7, skipped_calls=2),
        {"source": "user", "text": "stop", "inboxId": 7, "skippedCalls": 2},
    ),
    (ev.RunInterruptedEvent(by_run_id=RUN), {"byRunId": str(RUN)}),
]


def test_every_event_type_has_a_wire_sample() -> None:
    assert {e.type for e, _ in STORED} == set(ev.EVENT_TYPES)


@pytest.mark.parametrize(("event", "data"), STORED, ids=[e.type for e, _ in STORED])
def test_stored_data_and_wire_json_are_as_before(event: ev.RunEvent, data: dict[str, Any]) -> None:
    assert ev.event_data(event) == data
    stored = ev.stored_event(type_=event.type, data=data, run_id=RUN, seq=3, ts=TS)
    assert type(stored) is type(event)
    # The JSON the SSE stream and /runs/{runId}/events sent: the data plus the envelope.
    envelope = {"type": event.type, "runId": str(RUN), "seq": 3, "ts": TS.isoformat()}
    assert ev.wire_json(stored) == {**data, **envelope}
    assert ev.RUN_EVENT_ADAPTER.validate_json(json.dumps(ev.wire_json(stored)), strict=True) == (
        stored
    )


def test_validation_is_strict_and_closed() -> None:
    with pytest.raises(ValidationError):
        ev.RUN_EVENT_ADAPTER.validate_json(
            '{"type": "usage", "inputTokens": 1, "outputTokens": 2, "cost": 3}', strict=True
        )
    with pytest.raises(ValidationError):
        ev.RUN_EVENT_ADAPTER.validate_json('{"type": "run.started", "attempt": 1}', strict=True)
    with pytest.raises(ValidationError):
        ev.RUN_EVENT_ADAPTER.validate_json('{"type": "run.exploded"}', strict=True)


def test_the_openapi_document_shows_every_event() -> None:
    from app.api.app import create_app
    from app.config import Settings

    settings = Settings(database_url="postgresql+asyncpg://u:p@127.0.0.1:1/none")
    schemas = create_app(settings).openapi()["components"]["schemas"]
    for cls in ev.EVENT_CLASSES:
        assert cls.__name__ in schemas, cls.__name__
        assert (
            schemas[cls.__name__]["properties"]["type"]["const"] == cls.model_fields["type"].default
        )
    page = schemas["RunEventsPage"]["properties"]["events"]["items"]
    assert {ref["$ref"].rsplit("/", 1)[1] for ref in page["oneOf"]} == {
        cls.__name__ for cls in ev.EVENT_CLASSES
    }
