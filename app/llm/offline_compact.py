"""The offline model's context-management rules (see `app.llm.offline`): summaries and flushes.

Both read the request's single user message, which wraps the text to work on in tags
(`app.runtime.summaries`): the summary so far in `<summary>…</summary>`, the transcript in
`<transcript>…</transcript>`, one block per message (`user: …`, `assistant: …`, `tool NAME …`).

* a summary request (`purpose="compact"`) is answered, without any intelligence, by one line per
  transcript message, `- ` and the message's first line quoted to 120 characters, after the
  lines of the summary so far; only the latest `MAX_SUMMARY_LINES` lines are kept. The lines
  never start with `/`, so no directive of the original messages fires again from a summary;
* a flush request (`purpose="flush"`) calls `memory_store` once for each distinct `/remember TEXT`
  line of the transcript's user messages (content `TEXT`, tag `remembered`), and answers `NONE`
  when there is none.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from app.core.transcript import ToolCall, UserMessage
from app.llm.base import Message

SUMMARY_TITLE = "Summary of the earlier conversation:"
MAX_SUMMARY_LINES = 60
QUOTE_CHARS = 120
_SUMMARY = re.compile(r"<summary>\n(.*?)\n</summary>", re.DOTALL)
_TRANSCRIPT = re.compile(r"<transcript>\n(.*?)\n</transcript>", re.DOTALL)
_BLOCK_START = re.compile(r"^(user|runtime|assistant|tool)\b")
_REMEMBER = re.compile(r"^(?:user: )?\s*/remember\s+(.+?)\s*$")


def _request_text(messages: Sequence[Message]) -> str:
    last = messages[-1] if messages else None
    return last.text if isinstance(last, UserMessage) else ""


def _quote(line: str) -> str:
    flat = " ".join(line.split())
    return flat if len(flat) <= QUOTE_CHARS else flat[: QUOTE_CHARS - 1] + "…"


def offline_summary(messages: Sequence[Message]) -> str:
    """The offline model's answer to a summary request."""
    text = _request_text(messages)
    lines: list[str] = []
    if found := _SUMMARY.search(text):
        lines += [ln for ln in found.group(1).splitlines() if ln.startswith("- ")]
    if found := _TRANSCRIPT.search(text):
        for line in found.group(1).splitlines():
            if _BLOCK_START.match(line):
                lines.append("- " + _quote(line))
    return "\n".join([SUMMARY_TITLE, *lines[-MAX_SUMMARY_LINES:]])


def offline_flush_calls(messages: Sequence[Message]) -> list[ToolCall]:
    """The `memory_store` calls of the offline model's answer to a flush request."""
    found = _TRANSCRIPT.search(_request_text(messages))
    if found is None:
        return []
    facts: list[str] = []
    in_user = False
    for line in found.group(1).splitlines():
        if start := _BLOCK_START.match(line):
            in_user = start.group(1) == "user"
        if in_user and (hit := _REMEMBER.match(line)) and hit.group(1) not in facts:
            facts.append(hit.group(1))
    calls = []
    for i, fact in enumerate(facts):
        digest = hashlib.sha256(fact.encode()).hexdigest()[:12]
        args = {"content": fact, "tags": ["remembered"]}
        calls.append(ToolCall(id=f"remember_{i}_{digest}", name="memory_store", args=args))
    return calls
