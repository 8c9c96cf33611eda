"""`offline`: a deterministic demo and test model. It is NOT intelligent and calls no network.

It follows fixed rules so that demos, end-to-end tests and the agent loop's tests can script a
whole run through the user's message alone. Directives act on the *first turn* (the model call
whose latest message is the user message); the *second turn* (latest messages are tool results)
summarises them:

* each line `/tool NAME {json args}` becomes a tool call, in order (args optional → `{}`; args
  that are not a JSON object → `{"_raw": "<the text>"}`, so the tool fails validation and the
  error is fed back);
* `/sleep MS` waits MS milliseconds (`asyncio.sleep`: cancellation interrupts it) before the
  *answer*: on the first turn when there are no tool calls, else on the turn summarising them;
* `/fail` makes the call fail with `ModelError("model_error", ...)`;
* `/think TEXT` streams TEXT as reasoning (`ThinkingDelta`, in two chunks) before the first
  turn's answer or calls;
* a line `/next` ends the directives of one turn and starts those of the next: the block after
  the k-th `/next` acts on the turn after k rounds of tool results (its `/tool` lines are that
  turn's calls; without any, that turn summarises the results). In a message with `/next`, each
  block's `/sleep` waits at the start of its own turn;
* `/answer TEXT` makes the final answer exactly TEXT (the rest of the line; `\n` in it is a line
  break, `\\` a backslash): on the first turn when there are no tool calls, else instead of the
  summary of their results (so a sub-agent's answer can be scripted: `/answer 42`);
* otherwise it answers `You said: <the message, verbatim>`, streamed in at least two chunks.

After tool results it answers one line per result: `<tool name> ok: <result>` or
`<tool name> failed: <error>`, the quote cut to at most 80 characters.

A sub-agent's outcome (a user-role message with `source` kind `subagent`, injected into the run
or queued as a follow-up run) is never read for directives — its text comes from another model —
and is answered `Noted: <its first line>`. A user's steered message (`user`) and another agent's
message (`agent`, from `sessions_send`: its text is that agent's prompt, so two scripted agents
can talk) are read like any user message.

Plan mode (`app.llm.offline_plan` has the details): asked for a plan (`purpose="plan"`), it
answers plan JSON built from a `/plan step one; step two` line (steps may carry inline calls:
`/plan write it /tool write_file {"path": "a", "content": "x"}; read it /tool read_file
{"path": "a"}`), `/replan …` gives the steps of a revised plan, and `/plan-invalid` /
`/plan-invalid-once` make every / the first plan answer malformed. Carrying out step N it makes
the step's inline calls, then answers `Step N done: <description>` (`Step N failed: …` after a
failed call).

Context management (`app.llm.offline_compact`): asked for a summary (`purpose="compact"`) it
lists the transcript's messages one line each; asked for a memory flush (`purpose="flush"`) it
stores each `/remember TEXT` line of the transcript with `memory_store`.

Usage is an estimate: `ceil(characters / 4)` of the request (system prompt, transcript JSON,
tool specs JSON) for input tokens and of the answer (text and tool-call JSON) for output tokens.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.transcript import (
    AssistantMessage,
    ToolCall,
    ToolResult,
    UserMessage,
    dump_message,
)
from app.llm.base import (
    Message,
    Model,
    ModelError,
    ModelEvent,
    ModelRequest,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    Usage,
)
from app.llm.offline_compact import offline_flush_calls, offline_summary
from app.llm.offline_plan import StepTurn, plan_answer, step_summary, step_turn

ECHO_PREFIX = "You said: "
NOTED_PREFIX = "Noted: "
QUOTE_MAX = 80
_TOOL_LINE = re.compile(r"^/tool\s+(\S+)(?:\s+(.*))?$", re.DOTALL)
_SLEEP_LINE = re.compile(r"^/sleep\s+(\d+)$")
_FAIL_LINE = "/fail"
_THINK_LINE = re.compile(r"^/think\s+(.+)$")
_ANSWER_LINE = re.compile(r"^/answer\s+(.+)$")
_ESCAPE = re.compile(r"\\(.)")


@dataclass(slots=True)
class Directives:
    """The directives found in a user message."""

    tool_calls: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    """(name, args, the directive line) per `/tool` line, in order."""
    sleep_ms: int = 0
    fail: bool = False
    thinking: list[str] = field(default_factory=list)
    """The text of each `/think` line, in order."""
    answer: str | None = None
    """The final answer a `/answer` line scripts (escapes resolved; the last line wins)."""


def parse_directives(text: str) -> Directives:
    """Find `/tool`, `/sleep`, `/fail`, `/think` and `/answer` lines (leading/trailing spaces
    ignored)."""
    found = Directives()
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if m := _TOOL_LINE.match(line):
            found.tool_calls.append((m.group(1), parse_args(m.group(2)), line))
        elif m := _SLEEP_LINE.match(line):
            found.sleep_ms += int(m.group(1))
        elif line == _FAIL_LINE:
            found.fail = True
        elif m := _THINK_LINE.match(line):
            found.thinking.append(m.group(1))
        elif m := _ANSWER_LINE.match(line):
            found.answer = unescape(m.group(1))
    return found


def unescape(text: str) -> str:
    """`\\n` → a line break, `\\X` → X (so `\\\\` is one backslash)."""
    return _ESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def injected(message: UserMessage | None) -> bool:
    """A sub-agent's outcome, reported to its parent (not a prompt to follow)."""
    return message is not None and message.source is not None and message.source.kind == "subagent"


def parse_args(raw: str | None) -> dict[str, Any]:
    """`{json}` → the object; nothing → `{}`; anything else → `{"_raw": raw}`."""
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


def quote(text: str, limit: int = QUOTE_MAX) -> str:
    """`text` on one line, cut to at most `limit` characters (with an ellipsis when cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def summary_line(result: ToolResult) -> str:
    """`<name> ok: <result>` or `<name> failed: <error>`."""
    if result.ok:
        body = result.result if isinstance(result.result, str) else json.dumps(result.result)
        return f"{result.name} ok: {quote(body)}"
    return f"{result.name} failed: {quote(result.error or 'unknown error')}"


def estimate_tokens(chars: int) -> int:
    """The offline model's token estimate: a quarter of the characters, at least 1."""
    return max(1, math.ceil(chars / 4))


def split_chunks(text: str, parts: int = 3) -> list[str]:
    """`text` in up to `parts` consecutive non-empty chunks (one chunk if it is short)."""
    if not text:
        return []
    size = max(1, math.ceil(len(text) / parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _call_id(position: int, index: int, line: str) -> str:
    digest = hashlib.sha256(f"{position}:{index}:{line}".encode()).hexdigest()[:12]
    return f"call_{position}_{index}_{digest}"


def _request_chars(request: ModelRequest) -> int:
    messages = json.dumps([dump_message(m) for m in request.messages])
    tools = json.dumps([[t.name, t.description, t.parameters] for t in request.tools])
    return len(request.system_prompt) + len(messages) + len(tools)


def _trailing_results(messages: Sequence[Message]) -> list[ToolResult]:
    results: list[ToolResult] = []
    for m in reversed(messages):
        if not isinstance(m, ToolResult):
            break
        results.append(m)
    return results[::-1]


def _latest_user(messages: Sequence[Message]) -> tuple[int, UserMessage | None]:
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, UserMessage):
            return i, m
    return -1, None


class OfflineModel(Model):
    """The deterministic rule-following demo model (see the module docstring)."""

    def __init__(self, name: str = "offline") -> None:
        self.name = name

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Apply the rules to the request's latest messages."""
        input_tokens = estimate_tokens(_request_chars(request))
        if request.purpose == "flush":
            calls = offline_flush_calls(request.messages)
            for call in calls:
                yield ToolCallEvent(call)
            text = "" if calls else "NONE"
            if text:
                yield TextDelta(text)
            out = sum(len(json.dumps(c.args)) for c in calls) + len(text)
            yield Usage(input_tokens, estimate_tokens(out))
            return
        if request.purpose in ("plan", "compact"):
            if request.purpose == "plan":
                text = plan_answer(request.messages, parse_args)
            else:
                text = offline_summary(request.messages)
            for chunk in split_chunks(text):
                yield TextDelta(chunk)
            yield Usage(input_tokens, estimate_tokens(len(text)))
            return
        if (step := step_turn(request.messages, parse_args)) is not None:
            async for event in _step_events(step, request.messages, input_tokens):
                yield event
            return
        position, user = _latest_user(request.messages)
        message = user.text if user is not None else ""
        if injected(user):
            text = NOTED_PREFIX + (message.splitlines() or [""])[0]
            for chunk in split_chunks(text):
                yield TextDelta(chunk)
            yield Usage(input_tokens, estimate_tokens(len(text)))
            return
        directives = parse_directives(message)
        results = _trailing_results(request.messages)
        if (blocks := _blocks(message)) is not None:
            turn = _tool_turns_since(request.messages, position)
            block = parse_directives(blocks[turn]) if turn < len(blocks) else Directives()
            if block.sleep_ms:
                await asyncio.sleep(block.sleep_ms / 1000)
            if block.tool_calls:
                async for event in _call_events(block, position, input_tokens, turn=turn):
                    yield event
                return
            directives = Directives(thinking=block.thinking, fail=block.fail)
            if turn == 0:
                message = blocks[0]
        if results:
            if directives.sleep_ms:
                await asyncio.sleep(directives.sleep_ms / 1000)
            if directives.answer is not None:
                for chunk in split_chunks(directives.answer):
                    yield TextDelta(chunk)
                yield Usage(input_tokens, estimate_tokens(len(directives.answer)))
                return
            lines = [summary_line(r) for r in results]
            text = "\n".join(lines)
            for i, line in enumerate(lines):
                yield TextDelta(line if i == len(lines) - 1 else line + "\n")
            yield Usage(input_tokens, estimate_tokens(len(text)))
            return

        if directives.sleep_ms and not directives.tool_calls:
            await asyncio.sleep(directives.sleep_ms / 1000)
        for thought in directives.thinking:
            for chunk in split_chunks(thought, 2):
                yield ThinkingDelta(chunk)
        if directives.fail:
            raise ModelError("model_error", "the offline model failed on request (/fail)")
        if directives.tool_calls:
            async for event in _call_events(directives, position, input_tokens):
                yield event
            return

        if directives.answer is not None:
            chunks = split_chunks(directives.answer) or [""]
        elif message:
            chunks = [ECHO_PREFIX, *split_chunks(message)]
        else:
            chunks = [ECHO_PREFIX, "(nothing)"]
        for chunk in chunks:
            yield TextDelta(chunk)
            await asyncio.sleep(0)  # a real stream yields to the event loop between chunks
        yield Usage(input_tokens, estimate_tokens(sum(len(c) for c in chunks)))


_NEXT_LINE = "/next"


def _blocks(message: str) -> list[str] | None:
    """The message's per-turn blocks (split at `/next` lines), or None without any."""
    lines = message.splitlines()
    if not any(line.strip() == _NEXT_LINE for line in lines):
        return None
    blocks: list[list[str]] = [[]]
    for line in lines:
        if line.strip() == _NEXT_LINE:
            blocks.append([])
        else:
            blocks[-1].append(line)
    return ["\n".join(b) for b in blocks]


def _tool_turns_since(messages: Sequence[Message], position: int) -> int:
    """How many model turns with tool calls follow the message at `position`."""
    return sum(
        isinstance(m, AssistantMessage) and bool(m.tool_calls) for m in messages[position + 1 :]
    )


async def _call_events(
    directives: Directives, position: int, input_tokens: int, *, turn: int = 0
) -> AsyncIterator[ModelEvent]:
    """The tool calls of `directives` (ids derived from the user message's `position`, the turn
    and the line, so they are unique in the run) and usage."""
    out_chars = 0
    for i, (name, args, line) in enumerate(directives.tool_calls):
        salted = line if turn == 0 else f"{turn}|{line}"
        call = ToolCall(id=_call_id(position, i, salted), name=name, args=args)
        out_chars += len(name) + len(json.dumps(args))
        yield ToolCallEvent(call)
    yield Usage(input_tokens, estimate_tokens(out_chars))


async def _step_events(
    step: StepTurn, messages: Sequence[Message], input_tokens: int
) -> AsyncIterator[ModelEvent]:
    """A turn of plan step `step.index`: its calls, or its answer."""
    results = _trailing_results(messages[step.position + 1 :])
    if not results and step.calls:
        out_chars = 0
        for i, (name, args, line) in enumerate(step.calls):
            out_chars += len(name) + len(json.dumps(args))
            yield ToolCallEvent(ToolCall(id=_call_id(step.position, i, line), name=name, args=args))
        yield Usage(input_tokens, estimate_tokens(out_chars))
        return
    if results:
        text = step_summary(step, results, [summary_line(r) for r in results])
    else:
        text = f"Step {step.index} done: {step.description}"
    for chunk in split_chunks(text):
        yield TextDelta(chunk)
        await asyncio.sleep(0)
    yield Usage(input_tokens, estimate_tokens(len(text)))
