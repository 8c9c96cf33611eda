"""Our transcript as Gemini `contents`, and the thought signatures Gemini wants back.

* `UserMessage` → a `user` content with one text part;
* `AssistantMessage` → a `model` content: its text part, then one `function_call` part per tool
  call (with our call id);
* consecutive `ToolResult`s → ONE `user` content with a `function_response` part each (same id
  and name as the call; `{"output": result}` or `{"error": message}`), as Gemini expects the
  answers to one turn's calls together.

Thought signatures: thinking models attach an opaque `thought_signature` to a turn's first
function-call part, and Gemini 3 rejects a history whose function calls lack it. The transcript
has no place for it, so each model keeps the signatures it received (bounded, in memory) and
sends them back; a call whose signature is unknown (another process made it, or it was evicted)
gets Google's documented placeholder, `skip_thought_signature_validator`, on Gemini 3 and later.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from google.genai import types

from app.core.transcript import AssistantMessage, ToolResult, UserMessage
from app.llm.base import Message

PLACEHOLDER_SIGNATURE = b"skip_thought_signature_validator"
_MAJOR = re.compile(r"^(?:models/)?gemini-(\d+)")


class SignatureCache:
    """Thought signatures by tool call id (the most recent `limit`), and which came first."""

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self._by_call: OrderedDict[str, bytes] = OrderedDict()

    def remember(self, call_id: str, signature: bytes | None, *, first: bool) -> None:
        """Keep `signature` of a call (only first calls of a turn need one)."""
        if signature and first:
            self._by_call[call_id] = signature
            self._by_call.move_to_end(call_id)
            while len(self._by_call) > self._limit:
                self._by_call.popitem(last=False)

    def get(self, call_id: str) -> bytes | None:
        """The signature received with this call, if still known."""
        return self._by_call.get(call_id)


def needs_signatures(model: str) -> bool:
    """Gemini 3 and later reject replayed function calls without a thought signature."""
    m = _MAJOR.match(model)
    return m is None or int(m.group(1)) >= 3


def to_contents(
    messages: Sequence[Message], signatures: SignatureCache, *, model: str
) -> list[types.Content]:
    """The transcript as Gemini contents (see the module docstring)."""
    placeholder = PLACEHOLDER_SIGNATURE if needs_signatures(model) else None
    contents: list[types.Content] = []
    responses: list[types.Part] = []
    for message in messages:
        if isinstance(message, ToolResult):
            responses.append(_response_part(message))
            continue
        if responses:
            contents.append(types.Content(role="user", parts=responses))
            responses = []
        if isinstance(message, UserMessage):
            contents.append(types.Content(role="user", parts=[types.Part(text=message.text)]))
        elif content := _model_content(message, signatures, placeholder):
            contents.append(content)
    if responses:
        contents.append(types.Content(role="user", parts=responses))
    return contents


def _model_content(
    message: AssistantMessage, signatures: SignatureCache, placeholder: bytes | None
) -> types.Content | None:
    parts = [types.Part(text=message.text)] if message.text else []
    for i, call in enumerate(message.tool_calls):
        signature = signatures.get(call.id) or (placeholder if i == 0 else None)
        parts.append(
            types.Part(
                function_call=types.FunctionCall(id=call.id, name=call.name, args=call.args),
                thought_signature=signature,
            )
        )
    return types.Content(role="model", parts=parts) if parts else None


def _response_part(result: ToolResult) -> types.Part:
    response: dict[str, Any] = (
        {"output": result.result} if result.ok else {"error": result.error or "failed"}
    )
    return types.Part(
        function_response=types.FunctionResponse(
            id=result.tool_call_id, name=result.name, response=response
        )
    )
