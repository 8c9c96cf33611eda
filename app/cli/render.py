"""The terminal renderer of a run's events (text, tools, approvals, plans, status lines)."""

from __future__ import annotations

import json
import os
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
        if kind == "assistant.delta":
            self._text(str(event.get("text", "")))
            self._streamed = True
        elif kind == "thinking.delta":
            if not self._thinking:
                self.end_line()
                self._thinking = True
            text = str(event.get("text", ""))
            if text:
                self._write(f"{self._dim}{text}{self._reset}")
                self._inline = not text.endswith("\n")
        elif kind == "assistant.message":
            if not self._streamed:
                self._text(str(event.get("text") or ""))
            self._streamed = False
            self.end_line()
        elif kind == "assistant.reset":
            self._streamed = False
            self._line(
                "(the model call restarted; its partial answer above is discarded)", self._dim
            )
        elif kind == "model.retry":
            reason = _one_line(event.get("reason") or "transient error", 120)
            delay = event.get("delaySeconds")
            when = f" in {delay} s" if delay is not None else ""
            attempt = event.get("attempt")
            self._line(f"(model call failed: {reason}; retry {attempt}{when})", self._dim)
        elif kind == "tool.started":
            args = _one_line(event.get("args", {}))
            self._line(f"{self.sym['call']} tool {event.get('name')} {args}", self._dim)
        elif kind == "tool.completed":
            self._line(f"{self.sym['ok']} ok: {_one_line(event.get('result'))}", self._dim)
        elif kind == "tool.failed":
            error = _one_line(describe_error(event.get("error")))
            self._line(f"{self.sym['fail']} failed: {error}", self._red)
        elif kind == "approval.required":
            self._approval_required(event)
        elif kind == "approval.resolved":
            self._line(f"({_decision(event)})", self._dim)
        elif kind in ("plan.created", "plan.updated"):
            self._plan(event)
        elif kind == "plan.step":
            reason = f": {_one_line(event['reason'], 120)}" if event.get("reason") else ""
            self._line(f"(step {event.get('index')} {event.get('status')}{reason})", self._dim)
        elif kind == "context.compacted":
            self._line(
                f"(context compacted: messages {event.get('fromSeq')}–{event.get('toSeq')} "
                f"summarised, {event.get('tokensBefore')} → {event.get('tokensAfter')} tokens)",
                self._dim,
            )
        elif kind == "context.compaction_failed":
            error = _one_line(describe_error(event.get("error")), 160)
            self._line(f"(context compaction failed: {error})", self._dim)
        elif kind == "usage":
            self.input_tokens += int(event.get("inputTokens") or 0)
            self.output_tokens += int(event.get("outputTokens") or 0)
        elif kind == "run.requeued":
            self._line("(its worker stopped; the run went back to the queue)", self._dim)
        elif kind == "run.resumed":
            self._line("(resumed by a worker after the previous attempt ended)", self._dim)
        elif kind == "run.completed":
            result = event.get("result")
            if not self._any_text and isinstance(result, dict) and result.get("text"):
                self._text(str(result["text"]))
            usage = ""
            if self.input_tokens or self.output_tokens:
                usage = (
                    f" {self.sym['sep']} {self.input_tokens} tokens in, {self.output_tokens} out"
                )
            self._line(f"{self.sym['done']} completed{usage}", self._green)
            return EXIT_OK
        elif kind == "run.failed":
            error = describe_error(event.get("error"))
            self._line(f"{self.sym['fail']} run failed: {error}", self._red)
            return EXIT_RUN_FAILED
        elif kind == "run.cancelled":
            self._line(f"{self.sym['stop']} cancelled", self._red)
            return EXIT_RUN_FAILED
        return None

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

    def _plan(self, event: dict[str, Any]) -> None:
        plan = event.get("plan")
        steps = plan.get("steps", []) if isinstance(plan, dict) else []
        title = "plan" if event.get("type") == "plan.created" else "revised plan"
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
