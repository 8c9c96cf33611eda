"""The terminal renderer of a run's events (text, tools, approvals, plans, status lines)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, TextIO

from app.cli.errors import EXIT_OK, EXIT_RUN_FAILED


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


_Handler = Callable[[dict[str, Any]], int | None]
"""Renders one event of a given type; the exit code if that event ends the run."""


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
        self._handlers = self._event_handlers()

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

    def handle(self, event: dict[str, Any]) -> int | None:
        """Render one event (the SSE `data` object); the exit code if it ends the run."""
        seq = event.get("seq")
        if isinstance(seq, int):
            if seq <= self.last_seq:
                return None  # already shown (a resumed stream may repeat nothing, but be safe)
            self.last_seq = seq
        kind = event.get("type")
        if kind != "thinking.delta" and self._thinking:
            self.end_line()
            self._thinking = False
        handler = self._handlers.get(kind) if isinstance(kind, str) else None
        return handler(event) if handler is not None else None

    def _event_handlers(self) -> dict[str, _Handler]:
        """Event `type` -> the method that renders it (unknown types are ignored)."""
        return {
            "assistant.delta": self._assistant_delta,
            "thinking.delta": self._thinking_delta,
            "assistant.message": self._assistant_message,
            "assistant.reset": self._assistant_reset,
            "model.retry": self._model_retry,
            "tool.started": self._tool_started,
            "tool.completed": self._tool_completed,
            "tool.failed": self._tool_failed,
            "approval.required": self._approval_required,
            "approval.resolved": self._approval_resolved,
            "plan.created": self._plan_created,
            "plan.updated": self._plan_updated,
            "plan.step": self._plan_step,
            "context.compacted": self._context_compacted,
            "context.compaction_failed": self._context_compaction_failed,
            "usage": self._usage,
            "run.requeued": self._run_requeued,
            "run.resumed": self._run_resumed,
            "run.completed": self._run_completed,
            "run.failed": self._run_failed,
            "run.cancelled": self._run_cancelled,
        }

    # ----------------------------------------------------------------- one method per event type

    def _assistant_delta(self, event: dict[str, Any]) -> None:
        self._text(str(event.get("text", "")))
        self._streamed = True

    def _thinking_delta(self, event: dict[str, Any]) -> None:
        if not self._thinking:
            self.end_line()
            self._thinking = True
        text = str(event.get("text", ""))
        if text:
            self._write(f"{self._dim}{text}{self._reset}")
            self._inline = not text.endswith("\n")

    def _assistant_message(self, event: dict[str, Any]) -> None:
        if not self._streamed:
            self._text(str(event.get("text") or ""))
        self._streamed = False
        self.end_line()

    def _assistant_reset(self, event: dict[str, Any]) -> None:
        self._streamed = False
        self._line("(the model call restarted; its partial answer above is discarded)", self._dim)

    def _model_retry(self, event: dict[str, Any]) -> None:
        reason = _one_line(event.get("reason") or "transient error", 120)
        delay = event.get("delaySeconds")
        when = f" in {delay} s" if delay is not None else ""
        attempt = event.get("attempt")
        self._line(f"(model call failed: {reason}; retry {attempt}{when})", self._dim)

    def _tool_started(self, event: dict[str, Any]) -> None:
        args = _one_line(event.get("args", {}))
        self._line(f"{self.sym['call']} tool {event.get('name')} {args}", self._dim)

    def _tool_completed(self, event: dict[str, Any]) -> None:
        self._line(f"{self.sym['ok']} ok: {_one_line(event.get('result'))}", self._dim)

    def _tool_failed(self, event: dict[str, Any]) -> None:
        error = _one_line(describe_error(event.get("error")))
        self._line(f"{self.sym['fail']} failed: {error}", self._red)

    def _approval_required(self, event: dict[str, Any]) -> None:
        args = _one_line(event.get("args", {}), 160)
        why = f"{event.get('reason')}, risk {event.get('risk')}"
        self._line(
            f"{self.sym['stop']} waiting for approval: tool {event.get('tool')} {args} ({why})",
            self._red,
        )
        self._line(
            f"  decide: POST /api/agent-runtime/approvals/{event.get('approvalId')} "
            '{"decision": "approve"} or {"decision": "deny"}',
            self._dim,
        )

    def _approval_resolved(self, event: dict[str, Any]) -> None:
        self._line(f"({_decision(event)})", self._dim)

    def _plan_created(self, event: dict[str, Any]) -> None:
        self._plan("plan", event)

    def _plan_updated(self, event: dict[str, Any]) -> None:
        self._plan("revised plan", event)

    def _plan_step(self, event: dict[str, Any]) -> None:
        reason = f": {_one_line(event['reason'], 120)}" if event.get("reason") else ""
        self._line(f"(step {event.get('index')} {event.get('status')}{reason})", self._dim)

    def _context_compacted(self, event: dict[str, Any]) -> None:
        self._line(
            f"(context compacted: messages {event.get('fromSeq')}–{event.get('toSeq')} "
            f"summarised, {event.get('tokensBefore')} → {event.get('tokensAfter')} tokens)",
            self._dim,
        )

    def _context_compaction_failed(self, event: dict[str, Any]) -> None:
        error = _one_line(describe_error(event.get("error")), 160)
        self._line(f"(context compaction failed: {error})", self._dim)

    def _usage(self, event: dict[str, Any]) -> None:
        self.input_tokens += int(event.get("inputTokens") or 0)
        self.output_tokens += int(event.get("outputTokens") or 0)

    def _run_requeued(self, event: dict[str, Any]) -> None:
        self._line("(its worker stopped; the run went back to the queue)", self._dim)

    def _run_resumed(self, event: dict[str, Any]) -> None:
        self._line("(resumed by a worker after the previous attempt ended)", self._dim)

    def _run_completed(self, event: dict[str, Any]) -> int:
        result = event.get("result")
        if not self._any_text and isinstance(result, dict) and result.get("text"):
            self._text(str(result["text"]))
        usage = ""
        if self.input_tokens or self.output_tokens:
            usage = f" {self.sym['sep']} {self.input_tokens} tokens in, {self.output_tokens} out"
        self._line(f"{self.sym['done']} completed{usage}", self._green)
        return EXIT_OK

    def _run_failed(self, event: dict[str, Any]) -> int:
        error = describe_error(event.get("error"))
        self._line(f"{self.sym['fail']} run failed: {error}", self._red)
        return EXIT_RUN_FAILED

    def _run_cancelled(self, event: dict[str, Any]) -> int:
        self._line(f"{self.sym['stop']} cancelled", self._red)
        return EXIT_RUN_FAILED

    # ----------------------------------------------------------------- helpers of the above

    def _plan(self, title: str, event: dict[str, Any]) -> None:
        """`title:` then the plan's steps, one per line."""
        plan = event.get("plan")
        steps = plan.get("steps", []) if isinstance(plan, dict) else []
        self._line(f"{title}:", self._dim)
        for step in steps if isinstance(steps, list) else []:
            if isinstance(step, dict):
                status = step.get("status")
                mark = "" if status in (None, "pending") else f" ({status})"
                desc = _one_line(step.get("description", ""), 160)
                self._line(f"  {step.get('index')}. {desc}{mark}", self._dim)


def _decision(event: dict[str, Any]) -> str:
    """An `approval.resolved` event in words."""
    decision = event.get("decision")
    if decision == "expired":
        return "the approval expired: the call is refused"
    who = f" by {event.get('decidedBy')}" if event.get("decidedBy") else ""
    reason = f": {_one_line(event['reason'], 120)}" if event.get("reason") else ""
    verb = "approved" if decision == "approve" else "denied"
    return f"{verb}{who}{reason}"
