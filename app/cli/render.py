"""The terminal renderer of a run's events (text, tools, approvals, plans, status lines)."""

from __future__ import annotations

import json
import os
from typing import Any, TextIO

from pydantic import ValidationError

from app.cli.errors import EXIT_OK, EXIT_RUN_FAILED
from app.core.events import (
    RUN_EVENT_ADAPTER,
    ApprovalRequiredEvent,
    ApprovalResolvedEvent,
    AssistantDeltaEvent,
    AssistantMessageEvent,
    AssistantResetEvent,
    ContextCompactedEvent,
    ContextCompactionFailedEvent,
    EventError,
    MessageInjectedEvent,
    ModelFallbackEvent,
    ModelRetryEvent,
    PlanCreatedEvent,
    PlanOutline,
    PlanStepEvent,
    PlanUpdatedEvent,
    RunCancelledEvent,
    RunCompletedEvent,
    RunEvent,
    RunFailedEvent,
    RunInterruptedEvent,
    RunRequeuedEvent,
    RunResumedEvent,
    StateChangedEvent,
    SubagentCompletedEvent,
    SubagentSpawnedEvent,
    ThinkingDeltaEvent,
    ToolCompletedEvent,
    ToolFailedEvent,
    ToolStartedEvent,
    UsageEvent,
)


def _symbols(stream: TextIO) -> dict[str, str]:
    fancy = {"call": "→", "ok": "←", "fail": "✗", "done": "✓", "stop": "■", "sep": "·"}
    try:
        "".join(fancy.values()).encode(getattr(stream, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return {"call": "->", "ok": "<-", "fail": "x", "done": "ok", "stop": "#", "sep": "-"}
    return fancy


def _one_line(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = text.replace("\r", "").replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_error(error: Any) -> str:
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message")
        if code and message:
            return f"{code}: {message}"
        return str(message or code or json.dumps(error))
    return str(error)


class Renderer:
    """Turns run events into terminal output; `handle` returns the exit code at the end."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.sym = _symbols(out)
        color = out.isatty() and not os.environ.get("NO_COLOR")
        self._dim, self._red, self._green, self._reset = (
            ("\033[2m", "\033[31m", "\033[32m", "\033[0m") if color else ("", "", "", "")
        )
        self.last_seq = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self._inline = False  # text written without its newline yet
        self._streamed = False  # deltas seen for the current assistant message
        self._any_text = False
        self._thinking = False  # inside a run of thinking.delta chunks
        self._parked = False  # the run was parked (approval, wait): a resumption is expected

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def end_line(self) -> None:
        """Finish a line of streamed text, if one is open."""
        if self._inline:
            self._write("\n")
            self._inline = False

    def _line(self, text: str, style: str = "") -> None:
        self.end_line()
        self._write(f"{style}{text}{self._reset if style else ''}\n")

    def _text(self, text: str) -> None:
        if text:
            self._write(text)
            self._inline = not text.endswith("\n")
            self._any_text = True

    def handle(self, data: dict[str, Any]) -> int | None:
        """Render one event (the SSE `data` object); the exit code if it ends the run. An event
        this version does not know (a newer server's) is skipped."""
        seq = data.get("seq")
        if isinstance(seq, int):
            if seq <= self.last_seq:
                return None  # already shown (a resumed stream may repeat nothing, but be safe)
            self.last_seq = seq
        try:
            event = RUN_EVENT_ADAPTER.validate_python(data)
        except ValidationError:
            return None
        if not isinstance(event, ThinkingDeltaEvent) and self._thinking:
            self.end_line()
            self._thinking = False
        return self.render(event)

    def render(self, event: RunEvent) -> int | None:  # noqa: C901 - one case per event type
        """Show one typed event; the exit code if it ends the run."""
        match event:
            case AssistantDeltaEvent(text=text):
                self._text(text)
                self._streamed = True
            case ThinkingDeltaEvent(text=text):
                self._thinking_delta(text)
            case AssistantMessageEvent(text=text):
                if not self._streamed:
                    self._text(text)
                self._streamed = False
                self.end_line()
            case AssistantResetEvent():
                self._streamed = False
                self._line(
                    "(the model call restarted; its partial answer above is discarded)", self._dim
                )
            case ModelRetryEvent():
                self._model_retry(event)
            case ModelFallbackEvent():
                self._line(
                    f"(model {event.from_} failed: {_one_line(event.message, 120)}; "
                    f"going on with {event.to})",
                    self._dim,
                )
            case ToolStartedEvent(name=name, args=args):
                self._line(f"{self.sym['call']} tool {name} {_one_line(args)}", self._dim)
            case ToolCompletedEvent(result=result):
                self._line(f"{self.sym['ok']} ok: {_one_line(result)}", self._dim)
            case ToolFailedEvent(error=error):
                self._line(f"{self.sym['fail']} failed: {_one_line(error or '')}", self._red)
            case ApprovalRequiredEvent():
                self._approval_required(event)
            case ApprovalResolvedEvent():
                self._line(f"({_decision(event)})", self._dim)
            case PlanCreatedEvent(plan=plan):
                self._plan("plan", plan)
            case PlanUpdatedEvent(plan=plan):
                self._plan("revised plan", plan)
            case PlanStepEvent(index=index, status=status, reason=reason):
                why = f": {_one_line(reason, 120)}" if reason else ""
                self._line(f"(step {index} {status}{why})", self._dim)
            case ContextCompactedEvent():
                self._line(
                    f"(context compacted: messages {event.from_seq}–{event.to_seq} summarised, "
                    f"{event.tokens_before} → {event.tokens_after} tokens)",
                    self._dim,
                )
            case ContextCompactionFailedEvent(error=error):
                self._line(f"(context compaction failed: {_error(error)})", self._dim)
            case UsageEvent(input_tokens=tokens_in, output_tokens=tokens_out):
                self.input_tokens += tokens_in
                self.output_tokens += tokens_out
            case SubagentSpawnedEvent(child_session_key=key, label=label, task=task):
                name = label or key
                self._line(
                    f"{self.sym['call']} sub-agent {name} spawned: {_one_line(task)}", self._dim
                )
            case SubagentCompletedEvent(status=status, error=error):
                name = event.label or event.child_session_key or str(event.child_run_id)
                why = f": {_error(error)}" if error is not None else ""
                self._line(f"{self.sym['call']} sub-agent {name} {status}{why}")
            case MessageInjectedEvent(source=source, text=text, skipped_calls=skipped):
                skip = f" ({skipped} tool call(s) skipped)" if skipped else ""
                self._line(f"» message from {source} injected{skip}: {_one_line(text)}", self._dim)
            case RunInterruptedEvent(by_run_id=by):
                self._line(f"{self.sym['stop']} interrupted by run {by}", self._red)
            case RunRequeuedEvent():
                self._line("(its worker stopped; the run went back to the queue)", self._dim)
            case StateChangedEvent(to=to) if to in ("awaiting_approval", "waiting"):
                self._parked = True
            case RunResumedEvent() if self._parked:
                self._parked = False
                self._line("(resumed)", self._dim)
            case RunResumedEvent():
                self._line("(resumed by a worker after the previous attempt ended)", self._dim)
            case RunCompletedEvent(result=result):
                return self._run_completed(result)
            case RunFailedEvent(error=error):
                self._line(f"{self.sym['fail']} run failed: {_error(error)}", self._red)
                return EXIT_RUN_FAILED
            case RunCancelledEvent():
                self._line(f"{self.sym['stop']} cancelled", self._red)
                return EXIT_RUN_FAILED
            case _:
                pass  # bookkeeping a person need not see (queued, started, state, plan.invalid…)
        return None

    # ----------------------------------------------------------------- helpers of `render`

    def _thinking_delta(self, text: str) -> None:
        if not self._thinking:
            self.end_line()
            self._thinking = True
        if text:
            self._write(f"{self._dim}{text}{self._reset}")
            self._inline = not text.endswith("\n")

    def _model_retry(self, event: ModelRetryEvent) -> None:
        reason = _one_line(event.reason or "transient error", 120)
        self._line(
            f"(model call failed: {reason}; retry {event.attempt} in {event.delay_seconds} s)",
            self._dim,
        )

    def _approval_required(self, event: ApprovalRequiredEvent) -> None:
        args = _one_line(event.args, 160)
        why = f"{event.reason}, risk {event.risk}"
        self._line(
            f"{self.sym['stop']} waiting for approval: tool {event.tool} {args} ({why})",
            self._red,
        )
        self._line(
            f"  decide: POST /api/agent-runtime/approvals/{event.approval_id} "
            '{"decision": "approve"} or {"decision": "deny"}',
            self._dim,
        )

    def _run_completed(self, result: dict[str, Any] | None) -> int:
        if not self._any_text and result and result.get("text"):
            self._text(str(result["text"]))
        usage = ""
        if self.input_tokens or self.output_tokens:
            usage = f" {self.sym['sep']} {self.input_tokens} tokens in, {self.output_tokens} out"
        self._line(f"{self.sym['done']} completed{usage}", self._green)
        return EXIT_OK

    def _plan(self, title: str, plan: PlanOutline) -> None:
        """`title:` then the plan's steps, one per line."""
        self._line(f"{title}:", self._dim)
        for step in plan.steps:
            mark = "" if step.status == "pending" else f" ({step.status})"
            desc = _one_line(step.description, 160)
            self._line(f"  {step.index}. {desc}{mark}", self._dim)


def _error(error: EventError | None) -> str:
    return "unknown error" if error is None else f"{error.code}: {error.message}"


def _decision(event: ApprovalResolvedEvent) -> str:
    """An `approval.resolved` event in words."""
    if event.decision == "expired":
        return "the approval expired: the call is refused"
    who = f" by {event.decided_by}" if event.decided_by else ""
    reason = f": {_one_line(event.reason, 120)}" if event.reason else ""
    verb = "approved" if event.decision == "approve" else "denied"
    return f"{verb}{who}{reason}"
