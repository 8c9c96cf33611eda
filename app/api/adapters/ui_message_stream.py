"""The AI SDK's UI message stream (protocol `v1`, what `useChat` reads), from a run's events.

One run is one assistant message: `start` (its `messageId` is the run id), then its parts as the
run's stored events arrive, then `finish`. The wire is SSE: each chunk is `data: {json}\\n\\n`,
the stream ends with `data: [DONE]`, and the response carries `x-vercel-ai-ui-message-stream: v1`.
The chunk shapes are the `ai` package's `uiMessageChunkSchema`; only chunks that v5, v6 and v7 of
the package all accept are sent (so no `reset-step`, no `tool-output-denied`).

The mapping (the README has it as a table):

* A model turn is a step: a step opens at the turn's first text, reasoning or tool chunk and
  closes when the loop starts the next model call (`state.changed` to `thinking`/`planning`) or
  the run ends, so a turn's tool calls and their results sit in the turn's step.
* `assistant.delta` → `text-start` (once per part) and `text-delta`; `thinking.delta` →
  `reasoning-start` / `reasoning-delta`; `assistant.message` ends the open parts (and sends the
  turn's text if a provider streamed none of it).
* `assistant.reset` (the model call restarted): the open text/reasoning parts end and a
  `data-reset` part marks the spot; the restarted call streams into new parts (the loop then
  moves back to `thinking`, which closes the step). A UI that hides abandoned text drops the
  text/reasoning parts of the step that ends with a `data-reset` part.
* `tool.started` → `tool-input-available`; `tool.completed` → `tool-output-available`;
  `tool.failed` → `tool-output-error` (a call refused before it ran is announced first, with the
  arguments of its `assistant.message` or `approval.required`). Housekeeping calls (tool events
  with a `purpose`, i.e. memory flushes) are not conversation parts: `data-memory-flush` sums
  them up.
* Everything without a standard chunk is a `data-*` part. Persistent ones carry an `id`, so a
  later chunk with the same id updates the part in place: `data-run` (id `run`: run id, status,
  attempt, error), `data-usage` (id `usage`: tokens so far), `data-plan` (id `plan`),
  `data-plan-step` (id `plan-step-<index>`), `data-plan-invalid`, `data-approval` (id = the
  approval id: pending, then the decision), `data-compaction`, `data-memory-flush`, `data-reset`,
  `data-subagent` (id `subagent-<childRunId>`: spawned with `status: running`, then its outcome),
  `data-message-injected` (id `injected-<inboxId>`), `data-interrupted`, `data-fallback` (id
  `fallback-<seq>`: the run moved to its next fallback model: from, to, reason, message).
  Transient ones (`transient: true`, only `onData` sees them): `data-state` (the loop's state)
  and `data-retry` (a model call is retried).
* `run.completed` → `finish` (`finishReason: "stop"`); `run.failed` → `error` (`errorText`)
  then `finish` (`"error"`); `run.cancelled` → `abort` (`reason`) then `finish` (`"other"`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final, assert_never

from app.core.events import (
    ApprovalRequiredEvent,
    ApprovalResolvedEvent,
    AssistantDeltaEvent,
    AssistantMessageEvent,
    AssistantResetEvent,
    ContextCompactedEvent,
    ContextCompactingEvent,
    ContextCompactionFailedEvent,
    MemoryFlushedEvent,
    MessageInjectedEvent,
    ModelFallbackEvent,
    ModelRetryEvent,
    PlanCreatedEvent,
    PlanInvalidEvent,
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

UIMessageChunk = dict[str, Any]
"""One chunk of the stream: a JSON object with `type` (the `ai` package's `UIMessageChunk`)."""

PROTOCOL_HEADERS: Final = {"x-vercel-ai-ui-message-stream": "v1", "cache-control": "no-cache"}
"""The response headers that announce the protocol (with `content-type: text/event-stream`)."""
DONE: Final = "[DONE]"
"""The `data` of the stream's last frame."""

_NEW_MODEL_CALL: Final = frozenset({"thinking", "planning"})
"""Loop states entered when a model call starts: the previous turn's step is over."""


def chunk_json(chunk: UIMessageChunk) -> str:
    """A chunk as the `data` of its SSE frame (compact JSON)."""
    return json.dumps(chunk, separators=(",", ":"), ensure_ascii=False)


class UIMessageStream:
    """Turns one run's events, fed in order, into the chunks of one assistant message.

    `start()` first, then `feed(event)` for each stored event (from seq 1: ids of parts are
    derived from seqs, so a replay produces the same chunks), then `close()` if the events ended
    without a terminal one. Pure: no I/O, no clock.
    """

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id
        self.finished = False
        """A terminal event was fed (`finish` has been produced)."""
        self._step_open = False
        self._text_id: str | None = None
        self._reasoning_id: str | None = None
        self._turn_text = ""  # text streamed in this turn since it started (or was reset)
        self._announced: set[str] = set()  # tool calls with a tool-input-available
        self._calls: dict[str, tuple[str, dict[str, Any]]] = {}  # id -> (name, args) seen
        self._usage = {"inputTokens": 0, "outputTokens": 0, "modelCalls": 0}
        self._run: dict[str, Any] = {"runId": message_id}
        self._approvals: dict[str, dict[str, Any]] = {}
        self._plan_steps: dict[int, dict[str, Any]] = {}
        self._compaction_id: str | None = None

    # ------------------------------------------------------------------ the three verbs

    def start(self) -> list[UIMessageChunk]:
        """The stream's first chunk: the assistant message, identified by the run id."""
        return [{"type": "start", "messageId": self.message_id}]

    def feed(self, event: RunEvent) -> list[UIMessageChunk]:
        """The chunks for one stored event (often none or one)."""
        if self.finished:
            return []
        seq = event.seq or 0
        match event:
            case RunQueuedEvent():
                return [self._run_part(status="queued", sessionKey=event.session_key)]
            case RunStartedEvent() | RunResumedEvent():
                return [self._run_part(status="running", attempt=event.attempt)]
            case RunRequeuedEvent():
                return [self._run_part(status="queued", attempt=event.attempt)]
            case StateChangedEvent():
                out = self._end_step() if event.to in _NEW_MODEL_CALL else []
                state = {"from": event.from_, "to": event.to}
                return [*out, _data("state", state, transient=True)]
            case AssistantDeltaEvent():
                return self._text(event.text, seq)
            case ThinkingDeltaEvent():
                return self._reasoning(event.text, seq)
            case AssistantResetEvent():
                out = self._end_text_and_reasoning()
                self._turn_text = ""
                return [*out, _data("reset", {"reason": "model call restarted"}, id=f"reset-{seq}")]
            case ModelRetryEvent():
                retry = {
                    "attempt": event.attempt,
                    "delaySeconds": event.delay_seconds,
                    "reason": event.reason,
                }
                return [_data("retry", retry, transient=True)]
            case ModelFallbackEvent():
                fallback = {"from": event.from_, "to": event.to, "reason": event.reason}
                fallback["message"] = event.message
                return [_data("fallback", fallback, id=f"fallback-{seq}")]
            case AssistantMessageEvent():
                return self._message(event, seq)
            case ToolStartedEvent() if event.purpose is None:
                return self._announce(event.tool_call_id, event.name, event.args)
            case ToolCompletedEvent() if event.purpose is None:
                out = self._announce(event.tool_call_id, event.name)
                done = {"type": "tool-output-available", "toolCallId": event.tool_call_id}
                return [*out, {**done, "output": event.result}]
            case ToolFailedEvent() if event.purpose is None:
                out = self._announce(event.tool_call_id, event.name)
                error = event.error or "the tool call failed"
                failed = {"type": "tool-output-error", "toolCallId": event.tool_call_id}
                return [*out, {**failed, "errorText": error}]
            case ToolStartedEvent() | ToolCompletedEvent() | ToolFailedEvent():
                return []  # housekeeping (memory flush): summed up by memory.flushed
            case UsageEvent():
                self._usage["inputTokens"] += event.input_tokens
                self._usage["outputTokens"] += event.output_tokens
                self._usage["modelCalls"] += 1
                return [_data("usage", dict(self._usage), id="usage")]
            case ApprovalRequiredEvent():
                return self._approval_required(event)
            case ApprovalResolvedEvent():
                return [self._approval_resolved(event)]
            case PlanCreatedEvent():
                plan = event.plan.model_dump(mode="json", by_alias=True)
                return [_data("plan", {**plan, "revision": 0}, id="plan")]
            case PlanUpdatedEvent():
                plan = event.plan.model_dump(mode="json", by_alias=True)
                revised = {**plan, "revision": event.revision, "reason": event.reason}
                return [_data("plan", revised, id="plan")]
            case PlanStepEvent():
                return [self._plan_step(event)]
            case PlanInvalidEvent():
                invalid = {"attempt": event.attempt, "error": event.error}
                return [_data("plan-invalid", invalid, id=f"plan-invalid-{event.attempt}")]
            case ContextCompactingEvent():
                self._compaction_id = f"compaction-{seq}"
                fields = _fields(event)
                return [
                    _data("compaction", {"status": "compacting", **fields}, id=f"compaction-{seq}")
                ]
            case ContextCompactedEvent():
                ident, self._compaction_id = self._compaction_id or f"compaction-{seq}", None
                return [_data("compaction", {"status": "compacted", **_fields(event)}, id=ident)]
            case ContextCompactionFailedEvent():
                ident, self._compaction_id = self._compaction_id or f"compaction-{seq}", None
                return [_data("compaction", {"status": "failed", **_fields(event)}, id=ident)]
            case MemoryFlushedEvent():
                flushed = _fields(event)
                return [_data("memory-flush", flushed, id=f"memory-flush-{event.through_seq}")]
            case SubagentSpawnedEvent() | SubagentCompletedEvent():
                child = {"status": "running"} if isinstance(event, SubagentSpawnedEvent) else {}
                return [
                    _data(
                        "subagent", {**child, **_fields(event)}, id=f"subagent-{event.child_run_id}"
                    )
                ]
            case MessageInjectedEvent():
                return [_data("message-injected", _fields(event), id=f"injected-{event.inbox_id}")]
            case RunInterruptedEvent():
                return [_data("interrupted", _fields(event), id="interrupted")]
            case RunCompletedEvent():
                out = [*self._end_step(), self._run_part(status="completed")]
                return [*out, *self._finish("stop")]
            case RunFailedEvent():
                code = event.error.code if event.error is not None else "error"
                message = event.error.message if event.error is not None else "the run failed"
                failure = {"code": code, "message": message}
                out = [*self._end_step(), self._run_part(status="failed", error=failure)]
                return [*out, {"type": "error", "errorText": message}, *self._finish("error")]
            case RunCancelledEvent():
                out = [*self._end_step(), self._run_part(status="cancelled", reason=event.reason)]
                abort = {"type": "abort", "reason": event.reason}
                return [*out, abort, *self._finish("other")]
            case _:
                assert_never(event)

    def close(self) -> list[UIMessageChunk]:
        """End a stream whose events stopped without a terminal event (the run is gone)."""
        if self.finished:
            return []
        return [*self._end_step(), *self._finish("other")]

    # ------------------------------------------------------------------ parts

    def _open_step(self) -> list[UIMessageChunk]:
        if self._step_open:
            return []
        self._step_open = True
        return [{"type": "start-step"}]

    def _end_step(self) -> list[UIMessageChunk]:
        out = self._end_text_and_reasoning()
        self._turn_text = ""
        if self._step_open:
            self._step_open = False
            out.append({"type": "finish-step"})
        return out

    def _end_text_and_reasoning(self) -> list[UIMessageChunk]:
        out: list[UIMessageChunk] = []
        if self._reasoning_id is not None:
            out.append({"type": "reasoning-end", "id": self._reasoning_id})
            self._reasoning_id = None
        if self._text_id is not None:
            out.append({"type": "text-end", "id": self._text_id})
            self._text_id = None
        return out

    def _text(self, delta: str, seq: int) -> list[UIMessageChunk]:
        out = self._open_step()
        if self._reasoning_id is not None:  # the answer begins: the reasoning before it is over
            out.append({"type": "reasoning-end", "id": self._reasoning_id})
            self._reasoning_id = None
        if self._text_id is None:
            self._text_id = f"text-{seq}"
            out.append({"type": "text-start", "id": self._text_id})
        self._turn_text += delta
        out.append({"type": "text-delta", "id": self._text_id, "delta": delta})
        return out

    def _reasoning(self, delta: str, seq: int) -> list[UIMessageChunk]:
        out = self._open_step()
        if self._reasoning_id is None:
            self._reasoning_id = f"reasoning-{seq}"
            out.append({"type": "reasoning-start", "id": self._reasoning_id})
        out.append({"type": "reasoning-delta", "id": self._reasoning_id, "delta": delta})
        return out

    def _message(self, event: AssistantMessageEvent, seq: int) -> list[UIMessageChunk]:
        """The turn's complete message: send what the deltas did not, end the open parts, and
        remember its tool calls (their arguments, for calls refused before they start)."""
        out: list[UIMessageChunk] = []
        missing = ""
        if event.text.startswith(self._turn_text):
            missing = event.text[len(self._turn_text) :]
        if missing:
            out += self._text(missing, seq)
        out += self._end_text_and_reasoning()
        self._turn_text = ""
        for call in event.tool_calls:
            self._calls[call.id] = (call.name, dict(call.args))
        return out

    def _announce(
        self, call_id: str, name: str, args: dict[str, Any] | None = None
    ) -> list[UIMessageChunk]:
        """`tool-input-available` for a call, once (the client needs it before any output)."""
        if call_id in self._announced:
            return []
        self._announced.add(call_id)
        if args is None:
            args = self._calls.get(call_id, (name, {}))[1]
        out = [*self._open_step(), *self._end_text_and_reasoning()]
        chunk = {"type": "tool-input-available", "toolCallId": call_id, "toolName": name}
        return [*out, {**chunk, "input": args}]

    def _approval_required(self, event: ApprovalRequiredEvent) -> list[UIMessageChunk]:
        approval = {
            "approvalId": str(event.approval_id),
            "toolCallId": event.tool_call_id,
            "tool": event.tool,
            "risk": event.risk,
            "reason": event.reason,
            "expiresAt": event.expires_at.isoformat(),
            "status": "pending",
        }
        self._approvals[str(event.approval_id)] = approval
        out = self._announce(event.tool_call_id, event.tool, dict(event.args))
        return [*out, _data("approval", approval, id=str(event.approval_id))]

    def _approval_resolved(self, event: ApprovalResolvedEvent) -> UIMessageChunk:
        ident = str(event.approval_id)
        approval = {
            **self._approvals.get(ident, {"approvalId": ident}),
            "status": event.decision,
            "decidedBy": event.decided_by,
        }
        if event.reason is not None:
            approval["decisionReason"] = event.reason
        self._approvals[ident] = approval
        return _data("approval", approval, id=ident)

    def _plan_step(self, event: PlanStepEvent) -> UIMessageChunk:
        step = {**self._plan_steps.get(event.index, {}), **_fields(event)}
        self._plan_steps[event.index] = step
        return _data("plan-step", step, id=f"plan-step-{event.index}")

    def _run_part(self, **fields: Any) -> UIMessageChunk:
        self._run = {**self._run, **fields}
        return _data("run", dict(self._run), id="run")

    def _finish(self, reason: str) -> list[UIMessageChunk]:
        self.finished = True
        return [{"type": "finish", "finishReason": reason}]


def _data(
    name: str, data: dict[str, Any], *, id: str | None = None, transient: bool = False
) -> UIMessageChunk:
    """A `data-<name>` part: with an `id`, a later part with the same id replaces it in the
    message; `transient` ones reach only the client's `onData`."""
    chunk: UIMessageChunk = {"type": f"data-{name}"}
    if id is not None:
        chunk["id"] = id
    chunk["data"] = data
    if transient:
        chunk["transient"] = True
    return chunk


def _fields(event: RunEvent) -> dict[str, Any]:
    """An event's own fields as camelCase JSON (no `type`, no envelope)."""
    return event.model_dump(mode="json", by_alias=True, exclude={"type", "run_id", "seq", "ts"})


def ui_message_chunks(message_id: str, events: Iterable[RunEvent]) -> list[UIMessageChunk]:
    """Every chunk of a run's events, start to finish (the pure mapping, for tests and tools)."""
    stream = UIMessageStream(message_id)
    chunks = stream.start()
    for event in events:
        chunks += stream.feed(event)
    return chunks + stream.close()
