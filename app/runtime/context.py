"""Context building (pure): which messages the model sees on each call, and what they cost.

The context of a call is the session's latest compaction summary (if any), as one user message,
followed by every transcript row after the range it covers (`app.runtime.compaction` decides
when to compact). Two changes are made on the way, none of them stored:

* a tool call that never got a result (its run was cancelled or failed mid-tool) gets a
  synthetic failed result right after its turn, because providers reject calls without results;
* a tool result longer than the limit is cut to its head and tail around a marker saying how
  much was left out (the stored row keeps the whole result).

Token estimates are `app.core.tokens` (a quarter of a message's stored JSON): the figure kept in
`session_messages.token_count`. The compaction phase calibrates it against the tokens the
provider reports (and uses the provider's own counter near the limit, where it has one).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from app.core.tokens import estimate_message_tokens, estimate_text_tokens
from app.core.transcript import AssistantMessage, Message, ToolCall, ToolResult, UserMessage
from app.llm.base import ToolSpec
from app.runtime.transcript_store import Entry

MISSING_RESULT = "no result was recorded for this call (its run ended before the tool finished)"
SUMMARY_HEADER = (
    "[Context summary: the conversation before this point (transcript messages {first}–{last}) "
    "was compacted into this summary; the original messages are kept in the session's history.]"
)
TRIM_MARKER = "\n…[{omitted} of {total} characters left out here; the full result is stored]…\n"


@dataclass(frozen=True, slots=True)
class Summary:
    """A compaction summary: its text and the transcript rows (by seq) it stands for."""

    text: str
    first_seq: int
    last_seq: int

    def message(self) -> UserMessage:
        """The summary as the first message of a context."""
        header = SUMMARY_HEADER.format(first=self.first_seq, last=self.last_seq)
        return UserMessage(text=f"{header}\n{self.text}")


@dataclass(frozen=True, slots=True)
class ContextItem:
    """A message of a context, the transcript row it comes from, and its estimated tokens.

    `seq`: the row's seq; for a synthetic result, its call's message; for the summary, the last
    row it covers. `summary`: this item is the compaction summary.
    """

    seq: int
    message: Message
    tokens: int
    summary: bool = False


def estimate_overhead_tokens(system_prompt: str, tools: Sequence[ToolSpec]) -> int:
    """The estimated tokens of what a call sends besides its messages."""
    specs = json.dumps([[t.name, t.description, t.parameters] for t in tools]) if tools else ""
    return estimate_text_tokens(system_prompt) + estimate_text_tokens(specs)


def trim_text(text: str, max_chars: int) -> str:
    """`text` in at most `max_chars`: two thirds head and one third tail around a marker saying
    how much was left out (unchanged if it fits; a plain cut if even the marker does not)."""
    if len(text) <= max_chars:
        return text
    marker_size = len(TRIM_MARKER.format(omitted=len(text), total=len(text)))
    keep = max_chars - marker_size
    if keep < 2:
        return text[:max_chars]
    head, tail = keep * 2 // 3, keep - keep * 2 // 3
    marker = TRIM_MARKER.format(omitted=len(text) - head - tail, total=len(text))
    return text[:head] + marker + text[len(text) - tail :]


def trim_tool_result(result: ToolResult, max_chars: int) -> ToolResult:
    """`result` with its payload cut to `max_chars` (head and tail), if longer; else itself."""
    if not result.ok:
        error = result.error or ""
        if len(error) <= max_chars:
            return result
        return result.model_copy(update={"error": trim_text(error, max_chars)})
    body = result.result if isinstance(result.result, str) else json.dumps(result.result)
    if len(body) <= max_chars:
        return result
    return result.model_copy(update={"result": trim_text(body, max_chars)})


def build_items(
    transcript: Sequence[Entry],
    *,
    summary: Summary | None = None,
    max_result_chars: int | None = None,
) -> list[ContextItem]:
    """The context for the next call, oldest first, with each message's estimated tokens.

    Rows covered by `summary` are replaced by it; results over `max_result_chars` are trimmed.
    """
    items: list[ContextItem] = []
    if summary is not None:
        head = summary.message()
        items.append(ContextItem(summary.last_seq, head, _tokens(head), summary=True))
    open_calls: list[tuple[int, ToolCall]] = []
    for entry in transcript:
        if summary is not None and entry.seq <= summary.last_seq:
            continue
        message = entry.message
        tokens = entry.tokens
        if isinstance(message, ToolResult):
            open_calls = [(s, c) for s, c in open_calls if c.id != message.tool_call_id]
            if max_result_chars is not None:
                message = trim_tool_result(message, max_result_chars)
                tokens = tokens if message is entry.message else None
        else:
            items.extend(_missing_results(open_calls))
            open_calls = (
                [(entry.seq, c) for c in message.tool_calls]
                if isinstance(message, AssistantMessage)
                else []
            )
        items.append(ContextItem(entry.seq, message, tokens or _tokens(message)))
    items.extend(_missing_results(open_calls))
    return items


def build_context(
    transcript: Sequence[Entry],
    *,
    summary: Summary | None = None,
    max_result_chars: int | None = None,
) -> list[Message]:
    """The messages for the next model call, oldest first (see `build_items`)."""
    return [
        i.message
        for i in build_items(transcript, summary=summary, max_result_chars=max_result_chars)
    ]


def cut_points(items: Sequence[ContextItem]) -> list[int]:
    """Where a context may be split into a part to summarise (`items[:k]`) and a part to keep.

    A cut never falls between a tool call and its results (results follow their call in a
    context), keeps at least one message, and summarises at least one transcript message.
    """
    first = 2 if items and items[0].summary else 1
    return [k for k in range(first, len(items)) if not isinstance(items[k].message, ToolResult)]


def choose_cut(items: Sequence[ContextItem], keep_tokens: int) -> int | None:
    """The cut that summarises the least while the kept part fits `keep_tokens`; if no cut gets
    there, the one that keeps the least. None: the context cannot be cut at all."""
    points = cut_points(items)
    if not points:
        return None
    tail = sum(i.tokens for i in items[points[0] :])
    previous = points[0]
    for k in points:
        tail -= sum(i.tokens for i in items[previous:k])
        previous = k
        if tail <= keep_tokens:
            return k
    return points[-1]


def _tokens(message: Message) -> int:
    return estimate_message_tokens(message)


def _missing_results(calls: Sequence[tuple[int, ToolCall]]) -> list[ContextItem]:
    items = []
    for seq, c in calls:
        result = ToolResult(tool_call_id=c.id, name=c.name, ok=False, error=MISSING_RESULT)
        items.append(ContextItem(seq, result, _tokens(result)))
    return items
