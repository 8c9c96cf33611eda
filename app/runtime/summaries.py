"""What a compaction asks the model (pure): the transcript rendered as text, cut into pieces that
fit one call, and the instructions for a summary or a memory flush.

The part of the context being compacted is rendered as plain text, one block per message
(`user: …`, `assistant: …`, `assistant called NAME {args}`, `tool NAME ok: …`), not sent as
messages: a summary request then needs no tools, never splits a call from its result, and can be
cut anywhere into pieces that fit the window. A long transcript is summarised piece by piece,
each request carrying the summary so far. Requests wrap the summary so far in `<summary>` and the
transcript in `<transcript>` tags (the offline model reads them; see `app.llm.offline_compact`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from app.core.tokens import estimate_text_tokens
from app.core.transcript import AssistantMessage, ToolResult, UserMessage
from app.llm.base import Message
from app.runtime.context import ContextItem, trim_text

ARGS_MAX_CHARS = 300
RESULT_MAX_CHARS = 1500
SUMMARY_MIN_TOKENS = 64
SUMMARY_MAX_TOKENS = 4000
REQUEST_OVERHEAD_TOKENS = 300
"""What a summary or flush request's instructions take, besides the transcript it carries."""

SUMMARY_SYSTEM_PROMPT = (
    "You compress conversation transcripts between a user and an AI agent into summaries that "
    "let the agent carry on the conversation without the original messages."
)
FLUSH_SYSTEM_PROMPT = (
    "You keep an AI agent's long-term memory. Part of the conversation is about to be replaced "
    "by a summary; store what must outlive it."
)


def render_message(message: Message) -> str:
    """One message as a block of plain text."""
    if isinstance(message, UserMessage):
        who = "runtime" if message.step is not None else "user"
        return f"{who}: {_indent(message.text)}"
    if isinstance(message, ToolResult):
        if message.ok:
            body = message.result if isinstance(message.result, str) else json.dumps(message.result)
            return f"tool {message.name} ok: {_indent(trim_text(body, RESULT_MAX_CHARS))}"
        error = trim_text(message.error or "unknown error", RESULT_MAX_CHARS)
        return f"tool {message.name} failed: {_indent(error)}"
    assert isinstance(message, AssistantMessage)
    lines = []
    if message.text:
        who = "assistant (plan)" if message.plan is not None else "assistant"
        lines.append(f"{who}: {_indent(message.text)}")
    for call in message.tool_calls:
        args = trim_text(json.dumps(call.args), ARGS_MAX_CHARS)
        lines.append(f"assistant called {call.name} {_indent(args)}")
    return "\n".join(lines) or "assistant: (no text)"


def _indent(text: str) -> str:
    return text.replace("\n", "\n  ")


def render_items(items: Sequence[ContextItem]) -> tuple[str | None, list[str]]:
    """The previous summary's text (if the items start with it) and a block per other message."""
    previous = None
    blocks = []
    for item in items:
        if item.summary:
            text = item.message.text if isinstance(item.message, UserMessage) else ""
            previous = text.split("\n", 1)[1] if "\n" in text else text  # without the header
        else:
            blocks.append(render_message(item.message))
    return previous, blocks


def pieces(blocks: Sequence[str], max_tokens: int) -> list[list[str]]:
    """`blocks` in consecutive groups of at most `max_tokens` (estimated) each; a block larger
    than that on its own is cut to its head and tail."""
    max_chars = max(max_tokens, 1) * 4
    out: list[list[str]] = []
    current: list[str] = []
    used = 0
    for block in blocks:
        block = trim_text(block, max_chars - 1)
        size = estimate_text_tokens(block) + 1
        if current and used + size > max_tokens:
            out.append(current)
            current, used = [], 0
        current.append(block)
        used += size
    if current:
        out.append(current)
    return out


def summary_limit(budget: int) -> int:
    """Most tokens a summary may take: an eighth of the budget, within fixed bounds."""
    return max(SUMMARY_MIN_TOKENS, min(SUMMARY_MAX_TOKENS, budget // 8))


def summary_request(previous: str | None, blocks: Sequence[str], limit_tokens: int) -> str:
    """The instruction asking for a summary of `previous` plus the transcript `blocks`."""
    words = max(20, limit_tokens * 3 // 4)
    earlier = (
        f"The summary of what came before the transcript:\n<summary>\n{previous}\n</summary>\n"
        if previous
        else ""
    )
    return (
        f"{earlier}The transcript to summarise:\n<transcript>\n"
        + "\n".join(blocks)
        + "\n</transcript>\n"
        "Write one summary of everything above (the earlier summary included) in at most "
        f"{words} words. Keep what the agent needs to continue: the user's requests and "
        "preferences, decisions made, facts learned, file names and identifiers, tool results "
        "that matter, and any task still open, with the latest request last. Reply with the "
        "summary only."
    )


def flush_request(blocks: Sequence[str]) -> str:
    """The instruction offering `memory_store` for the transcript `blocks` about to be compacted."""
    return (
        "This part of the conversation is about to be compacted into a summary:\n<transcript>\n"
        + "\n".join(blocks)
        + "\n</transcript>\n"
        "Call memory_store once for each durable fact worth remembering in future sessions "
        "(the user's preferences, decisions, facts about the user or the project); skip what "
        "only matters to this conversation. If nothing is worth keeping, reply NONE."
    )


def cap_summary(text: str, limit_tokens: int) -> str:
    """The model's summary, cut to its head if it went over `limit_tokens` (estimated)."""
    text = text.strip()
    max_chars = limit_tokens * 4
    if len(text) <= max_chars:
        return text
    return text[: max_chars - 40].rstrip() + "\n…[summary cut to its size limit]"
