"""The UI message stream adapter: typed run events in, AI SDK UI message chunks out, for every
event type (a new event type fails `test_every_event_type_has_a_mapping_case` until it has one)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from app.api.adapters.ui_message_stream import UIMessageStream, chunk_json, ui_message_chunks
from app.core.events import (
    EVENT_TYPES,
    ApprovalRequiredEvent,
    ApprovalResolvedEvent,
    AssistantDeltaEvent,
    AssistantMessageEvent,
    AssistantResetEvent,
    ContextCompactedEvent,
    ContextCompactingEvent,
    ContextCompactionFailedEvent,
    EventError,
    MemoryFlushedEvent,
    MessageInjectedEvent,
    ModelFallbackEvent,
    ModelRetryEvent,
    PlanCreatedEvent,
    PlanInvalidEvent,
    PlanOutline,
    PlanStepEvent,
    PlanUpdatedEvent,
    RunCancelledEvent,
    RunCompletedEvent,
    RunEvent,
    RunFailedEvent,
    RunInterruptedEvent,
    RunQueuedEvent,
    RunRequeuedEvent,
    RunResumedEvent,
    RunStartedEvent,
    StateChangedEvent,
    SubagentCompletedEvent,
    SubagentSpawnedEvent,
    ThinkingDeltaEvent,
    ToolCompletedEvent,
    ToolFailedEvent,
    ToolStartedEvent,
    UsageEvent,
)
from app.core.transcript import PlanStep, ToolCall

RUN = "7b0f2a64-4a8e-4f0e-9d61-2f3c7f0b9e11"
CHILD = "0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5"
APPROVAL = uuid.UUID("00000000-0000-4000-8000-000000000001")
SNAPSHOT = uuid.UUID("00000000-0000-4000-8000-000000000002")
EXPIRES = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
PLAN = PlanOutline(steps=[PlanStep(index=1, description="write it", tools=["write_file"])])


def numbered(*events: RunEvent) -> list[RunEvent]:
    """The events with seqs 1, 2, … (as stored)."""
    for i, event in enumerate(events, start=1):
        event.seq = i
    return list(events)


def chunks(*events: RunEvent) -> list[dict[str, Any]]:
    """The chunks between `start` and the end (without `start`)."""
    out = ui_message_chunks(RUN, numbered(*events))
    assert out[0] == {"type": "start", "messageId": RUN}
    return out[1:]


def types(*events: RunEvent) -> list[str]:
    return [c["type"] for c in chunks(*events)]


CLOSE_UNFINISHED = [{"type": "finish", "finishReason": "other"}]


# ------------------------------------------------------------------ one case per event type

CASES: dict[str, tuple[list[RunEvent], list[dict[str, Any]]]] = {
    "run.queued": (
        [RunQueuedEvent(session_key="chat-1")],
        [
            {
                "type": "data-run",
                "id": "run",
                "data": {"runId": RUN, "status": "queued", "sessionKey": "chat-1"},
            }
        ],
    ),
    "run.started": (
        [RunStartedEvent(attempt=1, worker_id="w1")],
        [
            {
                "type": "data-run",
                "id": "run",
                "data": {"runId": RUN, "status": "running", "attempt": 1},
            }
        ],
    ),
    "run.requeued": (
        [RunRequeuedEvent(attempt=1)],
        [
            {
                "type": "data-run",
                "id": "run",
                "data": {"runId": RUN, "status": "queued", "attempt": 1},
            }
        ],
    ),
    "run.resumed": (
        [RunResumedEvent(attempt=2, worker_id="w2")],
        [
            {
                "type": "data-run",
                "id": "run",
                "data": {"runId": RUN, "status": "running", "attempt": 2},
            }
        ],
    ),
    "assistant.delta": (
        [AssistantDeltaEvent(text="Hel"), AssistantDeltaEvent(text="lo")],
        [
            {"type": "start-step"},
            {"type": "text-start", "id": "text-1"},
            {"type": "text-delta", "id": "text-1", "delta": "Hel"},
            {"type": "text-delta", "id": "text-1", "delta": "lo"},
            {"type": "text-end", "id": "text-1"},
            {"type": "finish-step"},
        ],
    ),
    "thinking.delta": (
        [ThinkingDeltaEvent(text="hmm"), AssistantDeltaEvent(text="Yes")],
        [
            {"type": "start-step"},
            {"type": "reasoning-start", "id": "reasoning-1"},
            {"type": "reasoning-delta", "id": "reasoning-1", "delta": "hmm"},
            {"type": "reasoning-end", "id": "reasoning-1"},
            {"type": "text-start", "id": "text-2"},
            {"type": "text-delta", "id": "text-2", "delta": "Yes"},
            {"type": "text-end", "id": "text-2"},
            {"type": "finish-step"},
        ],
    ),
    "assistant.reset": (
        [AssistantDeltaEvent(text="Hel"), AssistantResetEvent(), AssistantDeltaEvent(text="Hi")],
        [
            {"type": "start-step"},
            {"type": "text-start", "id": "text-1"},
            {"type": "text-delta", "id": "text-1", "delta": "Hel"},
            {"type": "text-end", "id": "text-1"},
            {"type": "data-reset", "id": "reset-2", "data": {"reason": "model call restarted"}},
            {"type": "text-start", "id": "text-3"},
            {"type": "text-delta", "id": "text-3", "delta": "Hi"},
            {"type": "text-end", "id": "text-3"},
            {"type": "finish-step"},
        ],
    ),
    "model.retry": (
        [ModelRetryEvent(attempt=1, delay_seconds=0.5, reason="429 rate limited")],
        [
            {
                "type": "data-retry",
                "data": {"attempt": 1, "delaySeconds": 0.5, "reason": "429 rate limited"},
                "transient": True,
            }
        ],
    ),
    "model.fallback": (
        [
            ModelFallbackEvent(
                from_="gemini-2.5-flash", to="offline", reason="model_not_found", message="404"
            )
        ],
        [
            {
                "type": "data-fallback",
                "id": "fallback-1",
                "data": {
                    "from": "gemini-2.5-flash",
                    "to": "offline",
                    "reason": "model_not_found",
                    "message": "404",
                },
            }
        ],
    ),
    "assistant.message": (
        # the provider streamed part of the text only: the rest comes from the message
        [
            AssistantDeltaEvent(text="Hel"),
            AssistantMessageEvent(
                text="Hello", tool_calls=[ToolCall(id="c1", name="t", args={"a": 1})]
            ),
        ],
        [
            {"type": "start-step"},
            {"type": "text-start", "id": "text-1"},
            {"type": "text-delta", "id": "text-1", "delta": "Hel"},
            {"type": "text-delta", "id": "text-1", "delta": "lo"},
            {"type": "text-end", "id": "text-1"},
            {"type": "finish-step"},
        ],
    ),
    "tool.started": (
        [ToolStartedEvent(tool_call_id="c1", name="write_file", args={"path": "a.txt"})],
        [
            {"type": "start-step"},
            {
                "type": "tool-input-available",
                "toolCallId": "c1",
                "toolName": "write_file",
                "input": {"path": "a.txt"},
            },
            {"type": "finish-step"},
        ],
    ),
    "tool.completed": (
        [
            ToolStartedEvent(tool_call_id="c1", name="write_file", args={"path": "a.txt"}),
            ToolCompletedEvent(tool_call_id="c1", name="write_file", result={"bytes": 1}),
        ],
        [
            {"type": "start-step"},
            {
                "type": "tool-input-available",
                "toolCallId": "c1",
                "toolName": "write_file",
                "input": {"path": "a.txt"},
            },
            {"type": "tool-output-available", "toolCallId": "c1", "output": {"bytes": 1}},
            {"type": "finish-step"},
        ],
    ),
    "tool.failed": (
        # refused before it ran: announced with the arguments of its assistant.message
        [
            AssistantMessageEvent(
                text="", tool_calls=[ToolCall(id="c1", name="rm", args={"p": 1})]
            ),
            ToolFailedEvent(tool_call_id="c1", name="rm", error="denied by policy"),
        ],
        [
            {"type": "start-step"},
            {
                "type": "tool-input-available",
                "toolCallId": "c1",
                "toolName": "rm",
                "input": {"p": 1},
            },
            {"type": "tool-output-error", "toolCallId": "c1", "errorText": "denied by policy"},
            {"type": "finish-step"},
        ],
    ),
    "usage": (
        [UsageEvent(input_tokens=10, output_tokens=2), UsageEvent(input_tokens=5, output_tokens=1)],
        [
            {
                "type": "data-usage",
                "id": "usage",
                "data": {"inputTokens": 10, "outputTokens": 2, "modelCalls": 1},
            },
            {
                "type": "data-usage",
                "id": "usage",
                "data": {"inputTokens": 15, "outputTokens": 3, "modelCalls": 2},
            },
        ],
    ),
    "state.changed": (
        # a new model call ends the previous turn's step
        [
            AssistantDeltaEvent(text="a"),
            StateChangedEvent(from_="observing", to="thinking"),
            AssistantDeltaEvent(text="b"),
        ],
        [
            {"type": "start-step"},
            {"type": "text-start", "id": "text-1"},
            {"type": "text-delta", "id": "text-1", "delta": "a"},
            {"type": "text-end", "id": "text-1"},
            {"type": "finish-step"},
            {
                "type": "data-state",
                "data": {"from": "observing", "to": "thinking"},
                "transient": True,
            },
            {"type": "start-step"},
            {"type": "text-start", "id": "text-3"},
            {"type": "text-delta", "id": "text-3", "delta": "b"},
            {"type": "text-end", "id": "text-3"},
            {"type": "finish-step"},
        ],
    ),
    "approval.required": (
        [
            ApprovalRequiredEvent(
                approval_id=APPROVAL,
                tool_call_id="c1",
                tool="run_shell",
                args={"cmd": "ls"},
                risk="high",
                reason="rule 1",
                expires_at=EXPIRES,
            )
        ],
        [
            {"type": "start-step"},
            {
                "type": "tool-input-available",
                "toolCallId": "c1",
                "toolName": "run_shell",
                "input": {"cmd": "ls"},
            },
            {
                "type": "data-approval",
                "id": str(APPROVAL),
                "data": {
                    "approvalId": str(APPROVAL),
                    "toolCallId": "c1",
                    "tool": "run_shell",
                    "risk": "high",
                    "reason": "rule 1",
                    "expiresAt": "2026-01-01T12:00:00+00:00",
                    "status": "pending",
                },
            },
            {"type": "finish-step"},
        ],
    ),
    "approval.resolved": (
        [
            ApprovalResolvedEvent(
                approval_id=APPROVAL, decision="deny", decided_by="bob", reason="no"
            )
        ],
        [
            {
                "type": "data-approval",
                "id": str(APPROVAL),
                "data": {
                    "approvalId": str(APPROVAL),
                    "status": "deny",
                    "decidedBy": "bob",
                    "decisionReason": "no",
                },
            }
        ],
    ),
    "plan.created": (
        [PlanCreatedEvent(plan=PLAN)],
        [
            {
                "type": "data-plan",
                "id": "plan",
                "data": {**PLAN.model_dump(mode="json", by_alias=True), "revision": 0},
            }
        ],
    ),
    "plan.updated": (
        [PlanUpdatedEvent(plan=PLAN, revision=1, reason="step 1 failed")],
        [
            {
                "type": "data-plan",
                "id": "plan",
                "data": {
                    **PLAN.model_dump(mode="json", by_alias=True),
                    "revision": 1,
                    "reason": "step 1 failed",
                },
            }
        ],
    ),
    "plan.step": (
        [
            PlanStepEvent(index=1, status="running", description="write it"),
            PlanStepEvent(index=1, status="done"),
        ],
        [
            {
                "type": "data-plan-step",
                "id": "plan-step-1",
                "data": {"index": 1, "status": "running", "description": "write it"},
            },
            {
                "type": "data-plan-step",
                "id": "plan-step-1",
                "data": {"index": 1, "status": "done", "description": "write it"},
            },
        ],
    ),
    "plan.invalid": (
        [PlanInvalidEvent(attempt=1, error="no steps")],
        [
            {
                "type": "data-plan-invalid",
                "id": "plan-invalid-1",
                "data": {"attempt": 1, "error": "no steps"},
            }
        ],
    ),
    "context.compacting": (
        [
            ContextCompactingEvent(
                from_seq=1, to_seq=4, messages=4, tokens_before=900, budget=800, window=1000
            )
        ],
        [
            {
                "type": "data-compaction",
                "id": "compaction-1",
                "data": {
                    "status": "compacting",
                    "fromSeq": 1,
                    "toSeq": 4,
                    "messages": 4,
                    "tokensBefore": 900,
                    "budget": 800,
                    "window": 1000,
                },
            }
        ],
    ),
    "context.compacted": (
        [
            ContextCompactingEvent(
                from_seq=1, to_seq=4, messages=4, tokens_before=900, budget=800, window=1000
            ),
            ContextCompactedEvent(
                snapshot_id=SNAPSHOT,
                from_seq=1,
                to_seq=4,
                messages=4,
                tokens_before=900,
                tokens_after=100,
                summary_tokens=50,
            ),
        ],
        [
            {"type": "data-compaction", "id": "compaction-1", "data": pytest.approx},
            {
                "type": "data-compaction",
                "id": "compaction-1",
                "data": {
                    "status": "compacted",
                    "snapshotId": str(SNAPSHOT),
                    "fromSeq": 1,
                    "toSeq": 4,
                    "messages": 4,
                    "tokensBefore": 900,
                    "tokensAfter": 100,
                    "summaryTokens": 50,
                },
            },
        ],
    ),
    "context.compaction_failed": (
        [ContextCompactionFailedEvent(error=EventError(code="model_error", message="down"))],
        [
            {
                "type": "data-compaction",
                "id": "compaction-1",
                "data": {"status": "failed", "error": {"code": "model_error", "message": "down"}},
            }
        ],
    ),
    "memory.flushed": (
        # the flush's own tool calls are housekeeping: no tool parts
        [
            ToolStartedEvent(
                tool_call_id="f1", name="memory_store", args={}, purpose="memory_flush"
            ),
            ToolCompletedEvent(
                tool_call_id="f1", name="memory_store", result={}, purpose="memory_flush"
            ),
            ToolFailedEvent(
                tool_call_id="f2", name="memory_store", error="x", purpose="memory_flush"
            ),
            MemoryFlushedEvent(through_seq=7, stored=1, failed=1),
        ],
        [
            {
                "type": "data-memory-flush",
                "id": "memory-flush-7",
                "data": {"throughSeq": 7, "stored": 1, "failed": 1},
            }
        ],
    ),
    "run.completed": (
        [AssistantDeltaEvent(text="Hi"), RunCompletedEvent(result={"text": "Hi"})],
        [
            {"type": "start-step"},
            {"type": "text-start", "id": "text-1"},
            {"type": "text-delta", "id": "text-1", "delta": "Hi"},
            {"type": "text-end", "id": "text-1"},
            {"type": "finish-step"},
            {"type": "data-run", "id": "run", "data": {"runId": RUN, "status": "completed"}},
            {"type": "finish", "finishReason": "stop"},
        ],
    ),
    "run.failed": (
        [RunFailedEvent(error=EventError(code="model_error", message="the model failed"))],
        [
            {
                "type": "data-run",
                "id": "run",
                "data": {
                    "runId": RUN,
                    "status": "failed",
                    "error": {"code": "model_error", "message": "the model failed"},
                },
            },
            {"type": "error", "errorText": "the model failed"},
            {"type": "finish", "finishReason": "error"},
        ],
    ),
    "run.cancelled": (
        [RunCancelledEvent(reason="cancelled by request")],
        [
            {
                "type": "data-run",
                "id": "run",
                "data": {"runId": RUN, "status": "cancelled", "reason": "cancelled by request"},
            },
            {"type": "abort", "reason": "cancelled by request"},
            {"type": "finish", "finishReason": "other"},
        ],
    ),
    "subagent.spawned": (
        [
            SubagentSpawnedEvent(
                child_run_id=CHILD, child_session_key="s:sub:1", task="count", agent_id=CHILD
            )
        ],
        [
            {
                "type": "data-subagent",
                "id": f"subagent-{CHILD}",
                "data": {
                    "status": "running",
                    "childRunId": CHILD,
                    "childSessionKey": "s:sub:1",
                    "task": "count",
                    "agentId": CHILD,
                },
            }
        ],
    ),
    "subagent.completed": (
        [SubagentCompletedEvent(child_run_id=CHILD, status="completed", result={"text": "3"})],
        [
            {
                "type": "data-subagent",
                "id": f"subagent-{CHILD}",
                "data": {"childRunId": CHILD, "status": "completed", "result": {"text": "3"}},
            }
        ],
    ),
    "message.injected": (
        [MessageInjectedEvent(source="user", text="stop", inbox_id=4)],
        [
            {
                "type": "data-message-injected",
                "id": "injected-4",
                "data": {"source": "user", "text": "stop", "inboxId": 4},
            }
        ],
    ),
    "run.interrupted": (
        [RunInterruptedEvent(by_run_id=CHILD)],
        [{"type": "data-interrupted", "id": "interrupted", "data": {"byRunId": CHILD}}],
    ),
}

TERMINAL = {"run.completed", "run.failed", "run.cancelled"}


def test_every_event_type_has_a_mapping_case() -> None:
    assert set(CASES) == set(EVENT_TYPES)


@pytest.mark.parametrize("event_type", list(CASES))
def test_event_maps_to_chunks(event_type: str) -> None:
    events, expected = CASES[event_type]
    assert event_type in {e.type for e in events}
    if event_type not in TERMINAL:
        expected = expected + CLOSE_UNFINISHED
    got = chunks(*[e.model_copy() for e in events])
    assert len(got) == len(expected), got
    for chunk, want in zip(got, expected, strict=True):
        if want.get("data") is pytest.approx:  # a chunk another case pins down
            assert chunk["type"] == want["type"] and chunk["id"] == want["id"]
        else:
            assert chunk == want


# ------------------------------------------------------------------ whole runs


def test_a_tool_run_is_two_steps_with_calls_and_results_in_the_first() -> None:
    call = ToolCall(id="c1", name="write_file", args={"path": "a.txt", "content": "x"})
    got = types(
        RunQueuedEvent(session_key="s"),
        RunStartedEvent(attempt=1, worker_id="w"),
        StateChangedEvent(from_="queued", to="thinking"),
        AssistantMessageEvent(text="", tool_calls=[call]),
        UsageEvent(input_tokens=3, output_tokens=1),
        StateChangedEvent(from_="thinking", to="tool_calling"),
        ToolStartedEvent(tool_call_id="c1", name="write_file", args=call.args),
        ToolCompletedEvent(tool_call_id="c1", name="write_file", result="ok"),
        StateChangedEvent(from_="tool_calling", to="observing"),
        StateChangedEvent(from_="observing", to="thinking"),
        StateChangedEvent(from_="thinking", to="responding"),
        AssistantDeltaEvent(text="write_file ok"),
        AssistantMessageEvent(text="write_file ok", tool_calls=[]),
        UsageEvent(input_tokens=5, output_tokens=2),
        StateChangedEvent(from_="responding", to="completed"),
        RunCompletedEvent(result={"text": "write_file ok"}),
    )
    content = [t for t in got if not t.startswith("data-")]
    assert content == [
        "start-step",
        "tool-input-available",
        "tool-output-available",
        "finish-step",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]


def test_a_message_without_streamed_text_is_sent_whole() -> None:
    got = chunks(AssistantMessageEvent(text="all at once", tool_calls=[]))
    assert got[:4] == [
        {"type": "start-step"},
        {"type": "text-start", "id": "text-1"},
        {"type": "text-delta", "id": "text-1", "delta": "all at once"},
        {"type": "text-end", "id": "text-1"},
    ]


def test_the_same_events_give_the_same_chunks_and_nothing_after_the_end() -> None:
    events = numbered(AssistantDeltaEvent(text="a"), RunCompletedEvent(result={"text": "a"}))
    assert ui_message_chunks(RUN, events) == ui_message_chunks(RUN, events)
    stream = UIMessageStream(RUN)
    for event in events:
        stream.feed(event)
    assert stream.finished
    assert stream.feed(AssistantDeltaEvent(text="late", seq=9)) == [] and stream.close() == []


def test_chunks_are_compact_json() -> None:
    assert chunk_json({"type": "text-delta", "id": "t", "delta": "é"}) == (
        '{"type":"text-delta","id":"t","delta":"é"}'
    )
