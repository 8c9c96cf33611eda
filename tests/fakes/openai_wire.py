"""OpenAI Chat Completions wire format: `chat/completions` SSE chunks and error bodies."""

from __future__ import annotations

from typing import Any

from tests.fakes.server import JsonReply, StreamReply, sse


def chunk(delta: dict[str, Any], *, finish: str | None = None) -> dict[str, Any]:
    """One `chat.completion.chunk` with a single choice."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


def content(t: str) -> dict[str, Any]:
    """A text delta chunk."""
    return chunk({"content": t})


def reasoning(t: str) -> dict[str, Any]:
    """A `reasoning_content` delta chunk (vLLM, DeepSeek)."""
    return chunk({"reasoning_content": t})


def tool_call(
    index: int, *, id: str | None = None, name: str | None = None, args: str = ""
) -> dict[str, Any]:
    """A tool call fragment: the first carries id and name, later ones argument pieces."""
    fragment: dict[str, Any] = {"index": index, "function": {"arguments": args}}
    if id is not None:
        fragment["id"] = id
        fragment["type"] = "function"
    if name is not None:
        fragment["function"]["name"] = name
    return chunk({"tool_calls": [fragment]})


def finish(reason: str = "stop") -> dict[str, Any]:
    """The chunk that ends the choice."""
    return chunk({}, finish=reason)


def usage(prompt: int, completion: int) -> dict[str, Any]:
    """The final `include_usage` chunk (no choices)."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "test-model",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def stream(
    *chunks: dict[str, Any], delay: float = 0.0, cut: bool = False, hang: bool = False
) -> StreamReply:
    """The SSE stream of `chunks`, ending with `data: [DONE]` unless cut or hanging."""
    return StreamReply(sse(list(chunks), done=not (cut or hang)), delay=delay, cut=cut, hang=hang)


def answer(*texts: str, tokens: tuple[int, int] = (10, 5)) -> StreamReply:
    """A plain text answer, one chunk per text."""
    return stream(*(content(t) for t in texts), finish("stop"), usage(*tokens))


def error(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JsonReply:
    """An OpenAI API error response."""
    body = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return JsonReply(status, body, headers or {})
