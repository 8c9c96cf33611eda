"""Gemini API wire format: `:streamGenerateContent?alt=sse` chunks and error bodies; and, for
Vertex AI mode, a service-account key whose OAuth token endpoint is the fake server."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

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


def token(access_token: str = "ya29.test-token", expires_in: int = 3600) -> JsonReply:
    """An OAuth 2.0 token endpoint's answer (what Vertex AI credentials refresh against)."""
    body = {"access_token": access_token, "expires_in": expires_in, "token_type": "Bearer"}
    return JsonReply(200, body)


def service_account(path: Path, *, token_uri: str, project: str = "test-project") -> Path:
    """Write a service-account key file whose tokens come from `token_uri` (the fake server).

    Point `GOOGLE_APPLICATION_CREDENTIALS` at it and google-auth's Application Default
    Credentials sign a JWT with a fresh RSA key and exchange it there: Vertex AI mode without
    Google's token endpoint.
    """
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    info = {
        "type": "service_account",
        "project_id": project,
        "private_key_id": "test-key",
        "private_key": pem,
        "client_email": f"tests@{project}.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    }
    path.write_text(json.dumps(info))
    return path
