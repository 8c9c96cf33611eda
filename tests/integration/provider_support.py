"""One adapter per provider wire fake, so whole-run scenarios are written once for both.

An adapter knows, for its provider: the settings and model name that send a run to the fake
server; how to script the server's replies (a transient error, a streamed turn of thinking,
text and tool calls with usage, a stream cut mid-way); and how to read what the server received
(the declared tools, the plan's JSON schema, and whether a turn's request and the tool results
sent back look right on that wire). The wire formats themselves are `tests/fakes/*_wire.py`.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, ClassVar

from app.config import Settings
from app.core.transcript import ToolCall
from tests.fakes import gemini_wire as g
from tests.fakes import openai_wire as o
from tests.fakes.server import FakeServer, Recorded, Reply, StreamReply

RETRIES: dict[str, Any] = {
    "model_max_retries": 3,
    "model_retry_initial_delay_seconds": 0.01,
    "model_retry_max_delay_seconds": 0.05,
}


@dataclass(frozen=True)
class Usage:
    """A turn's token usage; `output` includes the `thinking` tokens."""

    input: int
    output: int
    thinking: int = 0


@dataclass(frozen=True)
class Transient:
    """A retryable error reply and what the `model.retry` event must say about it."""

    reply: Reply
    status: int
    says: str  # a piece of the provider's message, quoted in the retry reason
    retry_after: float | None = None  # the `Retry-After` the retry must honour, if any


class Wire:
    """The provider-neutral face of one wire fake."""

    name: ClassVar[str]
    model: ClassVar[str]

    def settings(self, server: FakeServer) -> Settings:
        """Settings that send `model` to `server` (short retry delays)."""
        raise NotImplementedError

    def transient_error(self) -> Transient:
        """A retryable error, as this provider reports it."""
        raise NotImplementedError

    def turn(
        self,
        *,
        thinking: tuple[str, ...] = (),
        text: tuple[str, ...] = (),
        calls: tuple[ToolCall, ...] = (),
        usage: Usage | None = None,
        cut: bool = False,
    ) -> StreamReply:
        """A streamed turn: thinking pieces, then text pieces, then tool calls; finished with
        `usage`, or broken off after the pieces when `cut`."""
        raise NotImplementedError

    def answer(self, *texts: str, usage: Usage) -> StreamReply:
        """A plain text answer, one streamed piece per text."""
        return self.turn(text=texts, usage=usage)

    def declared_tools(self, request: Recorded) -> list[str] | None:
        """Names of the tools a request offers; None when it has no tools field at all."""
        raise NotImplementedError

    def json_schema(self, request: Recorded) -> Any:
        """The JSON schema a request asks the answer to follow; None when it asks for none."""
        raise NotImplementedError

    def check_turn_request(self, request: Recorded) -> None:
        """Assert what every streamed turn request carries on this wire."""
        raise NotImplementedError

    def check_results_sent_back(
        self, request: Recorded, *, text: str, calls: list[ToolCall]
    ) -> None:
        """Assert `request` replays the user message, the assistant turn (`text` and `calls`,
        as scripted by `turn`) and then the results of `calls`, in order, as this wire wants."""
        raise NotImplementedError


class GeminiWire(Wire):
    """google-genai against `tests/fakes/gemini_wire.py` (the Gemini API, API-key mode)."""

    name = "gemini"
    model = "gemini-2.5-flash"
    key = "test-gemini-key-0123456789"
    signature = b"s1"  # the thought signature of a turn's first call

    def settings(self, server: FakeServer) -> Settings:
        return Settings(
            _env_file=None,
            lease_seconds=30,
            gemini_api_key=self.key,
            google_api_key=None,
            google_genai_use_vertexai=False,
            google_gemini_base_url=server.url,
            **RETRIES,
        )

    def transient_error(self) -> Transient:
        message = "Resource has been exhausted (e.g. check quota)."
        reply = g.error(429, message, "RESOURCE_EXHAUSTED", headers={"Retry-After": "0.02"})
        return Transient(reply, 429, "Resource has been exhausted", retry_after=0.02)

    def turn(
        self,
        *,
        thinking: tuple[str, ...] = (),
        text: tuple[str, ...] = (),
        calls: tuple[ToolCall, ...] = (),
        usage: Usage | None = None,
        cut: bool = False,
    ) -> StreamReply:
        parts = [g.text(t, thought=True) for t in thinking] + [g.text(t) for t in text]
        parts += [
            g.call(c.name, c.args, id=c.id, signature=self.signature if i == 0 else None)
            for i, c in enumerate(calls)
        ]
        assert parts, "a turn streams something"
        chunks = [g.chunk(p) for p in parts]
        if not cut:  # the last chunk finishes the turn and carries the usage metadata
            tokens = None
            if usage is not None:
                tokens = (usage.input, usage.output - usage.thinking, usage.thinking)
            chunks[-1] = g.chunk(parts[-1], finish="STOP", usage=tokens)
        return g.stream(*chunks, cut=cut)

    def declared_tools(self, request: Recorded) -> list[str] | None:
        body = request.json()
        if "tools" not in body:
            return None
        return [d["name"] for d in body["tools"][0]["functionDeclarations"]]

    def json_schema(self, request: Recorded) -> Any:
        config = request.json()["generationConfig"]
        if "responseMimeType" not in config:
            assert "responseJsonSchema" not in config
            return None
        assert config["responseMimeType"] == "application/json"
        return config["responseJsonSchema"]

    def check_turn_request(self, request: Recorded) -> None:
        thinking_config = request.json()["generationConfig"]["thinkingConfig"]
        assert (
            thinking_config.get("includeThoughts", thinking_config.get("include_thoughts")) is True
        )

    def check_results_sent_back(
        self, request: Recorded, *, text: str, calls: list[ToolCall]
    ) -> None:
        ids = [c.id for c in calls]
        contents = request.json()["contents"]
        assert [c["role"] for c in contents] == ["user", "model", "user"]  # results in one turn
        model_parts = contents[1]["parts"]
        assert model_parts[0] == {"text": text}
        assert [p["functionCall"]["id"] for p in model_parts[1:]] == ids
        assert base64.b64decode(model_parts[1]["thoughtSignature"]) == self.signature
        responses = [p["functionResponse"] for p in contents[2]["parts"]]
        assert [(r["id"], r["name"]) for r in responses] == [(c.id, c.name) for c in calls]
        assert all(set(r["response"]) == {"output"} for r in responses)


class OpenAIWire(Wire):
    """The openai SDK against `tests/fakes/openai_wire.py` (Chat Completions)."""

    name = "openai"
    model = "openai:test-model"
    key = "sk-test-0123456789"

    def settings(self, server: FakeServer) -> Settings:
        return Settings(
            _env_file=None,
            lease_seconds=30,
            openai_api_key=self.key,
            openai_base_url=f"{server.url}/v1",
            **RETRIES,
        )

    def transient_error(self) -> Transient:
        reply = o.error(503, "Service temporarily overloaded", type_="server_error")
        return Transient(reply, 503, "overloaded")  # no Retry-After: backoff delays

    def turn(
        self,
        *,
        thinking: tuple[str, ...] = (),
        text: tuple[str, ...] = (),
        calls: tuple[ToolCall, ...] = (),
        usage: Usage | None = None,
        cut: bool = False,
    ) -> StreamReply:
        chunks = [o.reasoning(t) for t in thinking] + [o.content(t) for t in text]
        chunks += _fragments(calls)
        if not cut:
            chunks.append(o.finish("tool_calls" if calls else "stop"))
            if usage is not None:  # completion tokens include the reasoning tokens
                chunks.append(o.usage(usage.input, usage.output))
        return o.stream(*chunks, cut=cut)

    def declared_tools(self, request: Recorded) -> list[str] | None:
        body = request.json()
        if "tools" not in body:
            return None
        return [t["function"]["name"] for t in body["tools"]]

    def json_schema(self, request: Recorded) -> Any:
        body = request.json()
        if "response_format" not in body:
            return None
        response_format = body["response_format"]
        assert response_format["type"] == "json_schema"
        return response_format["json_schema"]["schema"]

    def check_turn_request(self, request: Recorded) -> None:
        body = request.json()
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}  # the usage chunk comes

    def check_results_sent_back(
        self, request: Recorded, *, text: str, calls: list[ToolCall]
    ) -> None:
        ids = [c.id for c in calls]
        sent = request.json()["messages"]
        assert [m["role"] for m in sent] == ["user", "assistant"] + ["tool"] * len(calls)
        assert [m.get("tool_call_id") for m in sent[2:]] == ids
        assert sent[1]["content"] == text
        assert [c["id"] for c in sent[1]["tool_calls"]] == ids


def _fragments(calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
    """Tool call deltas as servers stream them: the first call's arguments in two fragments
    with the other calls in between (assembled by `index`), the other calls whole."""
    if not calls:
        return []
    first, *rest = calls
    args = json.dumps(first.args)
    split = args.find(", ") + 2 if ", " in args else len(args) // 2
    return [
        o.tool_call(0, id=first.id, name=first.name, args=args[:split]),
        *(
            o.tool_call(i, id=c.id, name=c.name, args=json.dumps(c.args))
            for i, c in enumerate(rest, start=1)
        ),
        o.tool_call(0, args=args[split:]),
    ]


WIRES: dict[str, Wire] = {w.name: w for w in (GeminiWire(), OpenAIWire())}
