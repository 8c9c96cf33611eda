"""Gemini API wire format: `:streamGenerateContent?alt=sse` chunks and error bodies."""

from __future__ import annotations

import base64
from typing import Any

from tests.fakes.server import JsonReply, StreamReply, sse


def text(t: str, *, thought: bool = False) -> dict[str, Any]:
    """A text (or thought) part."""
    return {"text": t, "thought": True} if thought else {"text": t}


def call(
    name: str, args: dict[str, Any], *, id: str | None = None, signature: bytes | None = None
) -> dict[str, Any]:
    """A function-call part."""
    fc: dict[str, Any] = {"name": name, "args": args}
    if id is not None:
        fc["id"] = id
    part: dict[str, Any] = {"functionCall": fc}
    if signature is not None:
        part["thoughtSignature"] = base64.b64encode(signature).decode()
    return part


def chunk(
    *parts: dict[str, Any], finish: str | None = None, usage: tuple[int, int, int] | None = None
) -> dict[str, Any]:
    """One streamed `GenerateContentResponse`; `usage` is (prompt, candidates, thoughts) tokens."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    body: dict[str, Any] = {"candidates": [candidate], "modelVersion": "gemini-2.5-flash"}
    if usage is not None:
        prompt, candidates, thoughts = usage
        body["usageMetadata"] = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": candidates,
            "thoughtsTokenCount": thoughts,
            "totalTokenCount": prompt + candidates + thoughts,
        }
    return body


def stream(
    *chunks: dict[str, Any], delay: float = 0.0, cut: bool = False, hang: bool = False
) -> StreamReply:
    """The SSE stream of `chunks`."""
    return StreamReply(sse(list(chunks)), delay=delay, cut=cut, hang=hang)


def answer(*texts: str, usage: tuple[int, int, int] = (10, 5, 0)) -> StreamReply:
    """A plain text answer, one chunk per text, finishing with STOP."""
    chunks = [chunk(text(t)) for t in texts[:-1]]
    return stream(*chunks, chunk(text(texts[-1]), finish="STOP", usage=usage))


def error(
    status: int,
    message: str,
    status_name: str,
    *,
    headers: dict[str, str] | None = None,
    details: list[Any] | None = None,
) -> JsonReply:
    """A Google API error response."""
    body: dict[str, Any] = {"code": status, "message": message, "status": status_name}
    if details is not None:
        body["details"] = details
    return JsonReply(status, {"error": body}, headers or {})
