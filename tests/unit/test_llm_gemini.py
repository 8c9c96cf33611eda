"""The Gemini provider: the real google-genai SDK against a local fake Gemini API server."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.config import Settings
from app.core.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage
from app.llm.base import (
    Message,
    Model,
    ModelError,
    ModelEvent,
    ModelRequest,
    RetryNotice,
    StreamReset,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    ToolSpec,
    Usage,
)
from app.llm.registry import ModelRegistry
from tests.fakes import gemini_wire as g
from tests.fakes.server import FakeServer, JsonReply

KEY = "test-gemini-key-0123456789"
TOOL = ToolSpec(
    name="read_file",
    description="Read a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
HELLO = ModelRequest(system_prompt="You are terse.", messages=[UserMessage(text="hello")])


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    fake = FakeServer()
    await fake.start()
    yield fake
    await fake.close()


def gemini(server: FakeServer, name: str = "gemini-2.5-flash", **values: Any) -> Model:
    """The registry's model `name`, pointed at the fake server, with quick retries."""
    defaults: dict[str, Any] = {
        "gemini_api_key": KEY,
        "google_api_key": None,
        "google_genai_use_vertexai": False,
        "google_gemini_base_url": server.url,
        "model_max_retries": 2,
        "model_retry_initial_delay_seconds": 0.01,
        "model_retry_max_delay_seconds": 0.5,
    }
    settings = Settings(_env_file=None, **{**defaults, **values})
    return ModelRegistry.from_settings(settings).resolve(name)


async def collect(model: Model, request: ModelRequest = HELLO) -> list[ModelEvent]:
    return [e async for e in model.stream(request)]


def final_text(events: list[ModelEvent]) -> str:
    """The answer as a client sees it: text deltas after the last reset."""
    out: list[str] = []
    for e in events:
        if isinstance(e, StreamReset):
            out = []
        elif isinstance(e, TextDelta):
            out.append(e.text)
    return "".join(out)


async def test_streams_text_thinking_and_usage(server: FakeServer) -> None:
    server.script(
        g.stream(
            g.chunk(g.text("Considering the greeting.", thought=True)),
            g.chunk(g.text("Hel")),
            g.chunk(g.text("lo!"), finish="STOP", usage=(12, 3, 7)),
        )
    )
    events = await collect(gemini(server))
    assert events == [
        ThinkingDelta("Considering the greeting."),
        TextDelta("Hel"),
        TextDelta("lo!"),
        Usage(input_tokens=12, output_tokens=10),
    ]
    [request] = server.requests
    assert request.method == "POST"
    assert request.path.endswith("/models/gemini-2.5-flash:streamGenerateContent")
    assert request.query == {"alt": ["sse"]}
    assert request.headers["x-goog-api-key"] == KEY
    body = request.json()
    assert body["systemInstruction"]["parts"] == [{"text": "You are terse."}]
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hello"}]}]
    thinking = body["generationConfig"]["thinkingConfig"]
    assert thinking.get("includeThoughts", thinking.get("include_thoughts")) is True
    assert "tools" not in body


@pytest.mark.parametrize(
    ("name", "values"),
    [("gemini-2.0-flash", {}), ("gemini-2.5-flash", {"gemini_include_thoughts": False})],
)
async def test_thoughts_only_when_supported_and_wanted(
    server: FakeServer, name: str, values: dict[str, Any]
) -> None:
    server.script(g.answer("ok"))
    assert final_text(await collect(gemini(server, name, **values))) == "ok"
    assert "thinkingConfig" not in server.requests[0].json().get("generationConfig", {})


async def test_function_calls_and_results_round_trip(server: FakeServer) -> None:
    server.script(
        g.stream(
            g.chunk(g.text("Reading both.")),
            g.chunk(
                g.call("read_file", {"path": "a.txt"}, id="fc-1", signature=b"sig-1"),
                g.call("read_file", {"path": "b.txt"}),
                finish="STOP",
                usage=(20, 8, 0),
            ),
        ),
        g.answer("Done."),
    )
    model = gemini(server, "gemini-3-flash")
    request = ModelRequest(system_prompt="", messages=[UserMessage(text="read")], tools=[TOOL])
    events = await collect(model, request)
    calls = [e.call for e in events if isinstance(e, ToolCallEvent)]
    assert [(c.name, c.args) for c in calls] == [
        ("read_file", {"path": "a.txt"}),
        ("read_file", {"path": "b.txt"}),
    ]
    assert calls[0].id == "fc-1" and calls[1].id and calls[1].id != "fc-1"
    assert events[0] == TextDelta("Reading both.") and events[-1] == Usage(20, 8)

    declared = server.requests[0].json()["tools"][0]["functionDeclarations"][0]
    schema = declared.get("parametersJsonSchema", declared.get("parameters_json_schema"))
    assert (declared["name"], declared["description"], schema) == (
        "read_file",
        "Read a file.",
        TOOL.parameters,
    )

    follow_up = ModelRequest(
        system_prompt="",
        messages=[
            UserMessage(text="read"),
            AssistantMessage(text="Reading both.", tool_calls=calls),
            ToolResult(tool_call_id=calls[0].id, name="read_file", ok=True, result="A"),
            ToolResult(tool_call_id=calls[1].id, name="read_file", ok=False, error="not found"),
        ],
        tools=[TOOL],
    )
    assert final_text(await collect(model, follow_up)) == "Done."
    contents = server.requests[1].json()["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    model_parts = contents[1]["parts"]
    assert model_parts[0] == {"text": "Reading both."}
    assert model_parts[1]["functionCall"] == {
        "id": "fc-1",
        "name": "read_file",
        "args": {"path": "a.txt"},
    }
    assert base64.b64decode(model_parts[1]["thoughtSignature"]) == b"sig-1"
    assert "thoughtSignature" not in model_parts[2]
    assert contents[2]["parts"] == [
        {"functionResponse": {"id": "fc-1", "name": "read_file", "response": {"output": "A"}}},
        {
            "functionResponse": {
                "id": calls[1].id,
                "name": "read_file",
                "response": {"error": "not found"},
            }
        },
    ]


async def test_unknown_signature_gets_the_placeholder_on_gemini_3(server: FakeServer) -> None:
    server.script(g.answer("ok"), g.answer("ok"))
    history: list[Message] = [
        UserMessage(text="read"),
        AssistantMessage(tool_calls=[ToolCall(id="old", name="read_file", args={"path": "x"})]),
        ToolResult(tool_call_id="old", name="read_file", ok=True, result="X"),
    ]
    request = ModelRequest(system_prompt="", messages=history, tools=[TOOL])
    await collect(gemini(server, "gemini-3-pro-preview"), request)
    await collect(gemini(server, "gemini-2.5-pro"), request)
    gemini3, gemini25 = (r.json()["contents"][1]["parts"][0] for r in server.requests)
    assert base64.b64decode(gemini3["thoughtSignature"]) == b"skip_thought_signature_validator"
    assert "thoughtSignature" not in gemini25


async def test_429_retry_after_is_honoured(server: FakeServer) -> None:
    server.script(
        g.error(
            429,
            "Resource has been exhausted.",
            "RESOURCE_EXHAUSTED",
            headers={"Retry-After": "0.3"},
        ),
        g.answer("after ", "waiting"),
    )
    events = await collect(gemini(server))
    [notice] = [e for e in events if isinstance(e, RetryNotice)]
    assert (notice.attempt, notice.delay_seconds) == (1, 0.3)
    assert "429" in notice.reason and "Resource has been exhausted." in notice.reason
    assert events[0] == notice and final_text(events) == "after waiting"
    first, second = server.requests
    assert second.at - first.at >= 0.3


async def test_429_retry_info_delay_is_capped(server: FakeServer) -> None:
    retry_info = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}
    server.script(
        g.error(429, "Quota exceeded.", "RESOURCE_EXHAUSTED", details=[retry_info]),
        g.answer("ok"),
    )
    events = await collect(gemini(server, model_retry_max_delay_seconds=0.1))
    assert [e.delay_seconds for e in events if isinstance(e, RetryNotice)] == [0.1]


async def test_500_then_success(server: FakeServer) -> None:
    server.script(g.error(500, "Internal error encountered.", "INTERNAL"), g.answer("fine"))
    events = await collect(gemini(server))
    [notice] = [e for e in events if isinstance(e, RetryNotice)]
    assert "500" in notice.reason and 0 < notice.delay_seconds <= 0.5
    assert final_text(events) == "fine" and len(server.requests) == 2


async def test_transient_failures_run_out(server: FakeServer) -> None:
    server.script(*[g.error(503, "The model is overloaded.", "UNAVAILABLE")] * 3)
    with pytest.raises(ModelError) as info:
        await collect(gemini(server))
    assert info.value.code == "model_unavailable_transient"
    assert "The model is overloaded." in info.value.message
    assert len(server.requests) == 3  # the first try and model_max_retries=2 retries


@pytest.mark.parametrize(
    ("status", "message", "status_name", "code"),
    [
        (400, "Invalid JSON payload received.", "INVALID_ARGUMENT", "model_bad_request"),
        (
            400,
            "API key not valid. Please pass a valid API key.",
            "INVALID_ARGUMENT",
            "model_auth_failed",
        ),
        (
            401,
            "Request had invalid authentication credentials.",
            "UNAUTHENTICATED",
            "model_auth_failed",
        ),
        (403, "The caller does not have permission.", "PERMISSION_DENIED", "model_auth_failed"),
        (
            404,
            "models/gemini-9 is not found for API version v1beta.",
            "NOT_FOUND",
            "model_not_found",
        ),
        (
            400,
            "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
            "INVALID_ARGUMENT",
            "model_context_too_long",
        ),
    ],
)
async def test_permanent_failures_fail_fast(
    server: FakeServer, status: int, message: str, status_name: str, code: str
) -> None:
    server.script(g.error(status, message, status_name), g.answer("never"))
    with pytest.raises(ModelError) as info:
        await collect(gemini(server))
    assert info.value.code == code and message in info.value.message
    assert len(server.requests) == 1


async def test_api_key_never_in_error_messages(server: FakeServer) -> None:
    server.script(g.error(400, f"API key not valid: {KEY}", "INVALID_ARGUMENT"))
    with pytest.raises(ModelError) as info:
        await collect(gemini(server))
    assert KEY not in info.value.message and KEY not in str(info.value)


async def test_safety_finish_blocks(server: FakeServer) -> None:
    blocked = g.chunk(finish="SAFETY")
    blocked["candidates"][0]["safetyRatings"] = [
        {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}
    ]
    server.script(g.stream(g.chunk(g.text("Here is how")), blocked))
    with pytest.raises(ModelError) as info:
        await collect(gemini(server))
    assert info.value.code == "model_safety_block"
    assert "SAFETY" in info.value.message and "DANGEROUS_CONTENT" in info.value.message
    assert len(server.requests) == 1


async def test_blocked_prompt(server: FakeServer) -> None:
    server.script(g.stream({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}}))
    with pytest.raises(ModelError) as info:
        await collect(gemini(server))
    assert info.value.code == "model_safety_block" and "PROHIBITED_CONTENT" in info.value.message


async def test_malformed_function_call_is_retried(server: FakeServer) -> None:
    server.script(g.stream(g.chunk(finish="MALFORMED_FUNCTION_CALL")), g.answer("ok"))
    events = await collect(gemini(server))
    assert any(isinstance(e, RetryNotice) for e in events) and final_text(events) == "ok"


async def test_stream_cut_after_partial_text_restarts_cleanly(server: FakeServer) -> None:
    server.script(
        g.stream(g.chunk(g.text("Partial ")), g.chunk(g.text("answ")), cut=True),
        g.answer("Complete ", "answer."),
    )
    events = await collect(gemini(server))
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "TextDelta",
        "TextDelta",
        "StreamReset",
        "RetryNotice",
        "TextDelta",
        "TextDelta",
        "Usage",
    ]
    assert final_text(events) == "Complete answer."


async def test_stream_without_finish_reason_is_retried(server: FakeServer) -> None:
    server.script(g.stream(g.chunk(g.text("half"))), g.answer("whole"))
    events = await collect(gemini(server))
    assert StreamReset() in events and final_text(events) == "whole"


async def test_cancel_closes_the_stream_promptly(server: FakeServer) -> None:
    server.script(g.stream(g.chunk(g.text("slow ")), hang=True))
    first = asyncio.Event()

    async def consume() -> None:
        async for event in gemini(server).stream(HELLO):
            if isinstance(event, TextDelta):
                first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 5)
    begin = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - begin < 1
    await asyncio.wait_for(server.disconnected.wait(), 1)


async def test_count_tokens(server: FakeServer) -> None:
    server.script(JsonReply(200, {"totalTokens": 42}))
    request = ModelRequest(
        system_prompt="Be brief.", messages=[UserMessage(text="hi")], tools=[TOOL]
    )
    count = await gemini(server).count_tokens(request)
    assert count > 42  # the API's count plus the tool declarations' estimate
    [sent] = server.requests
    assert sent.path.endswith("/models/gemini-2.5-flash:countTokens")
    assert [c["parts"][0]["text"] for c in sent.json()["contents"]] == ["Be brief.", "hi"]


async def test_environment_configures_models_slash_names(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "DEFAULT_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", server.url)
    server.script(g.answer("from ", "env"))
    registry = ModelRegistry.from_settings(Settings(_env_file=None))
    assert final_text(await collect(registry.resolve("models/gemini-2.5-pro"))) == "from env"
    [request] = server.requests
    assert request.path.endswith("/models/gemini-2.5-pro:streamGenerateContent")
    assert request.headers["x-goog-api-key"] == KEY


async def test_connection_refused_is_retried_then_fails(server: FakeServer) -> None:
    url = server.url
    await server.close()  # nothing listens on the port any more
    with pytest.raises(ModelError) as info:
        await collect(gemini(server, google_gemini_base_url=url, model_max_retries=1))
    assert info.value.code == "model_unavailable_transient"
    assert "2 attempts" in info.value.message


async def test_read_timeout_is_retried(server: FakeServer) -> None:
    server.script(g.stream(g.chunk(g.text("zzz")), hang=True), g.answer("awake"))
    events = await collect(gemini(server, model_request_timeout_seconds=0.3))
    assert StreamReset() in events and final_text(events) == "awake"


# ---------------------------------------------------------------------------- structured output

PLAN_SCHEMA = {
    "type": "object",
    "properties": {"steps": {"type": "array", "items": {"type": "string"}}},
    "required": ["steps"],
}


async def test_response_schema_asks_for_json(server: FakeServer) -> None:
    server.script(g.answer('{"steps": ', '["a"]}'))
    request = ModelRequest(
        system_prompt="Plan.",
        messages=[UserMessage(text="do a")],
        response_schema=PLAN_SCHEMA,
        purpose="plan",
    )
    assert final_text(await collect(gemini(server), request)) == '{"steps": ["a"]}'
    config = server.requests[0].json()["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == PLAN_SCHEMA
    assert "responseSchema" not in config


async def test_no_json_mode_for_free_text_or_with_tools(server: FakeServer) -> None:
    server.script(g.answer("free"), g.answer("tools"))
    await collect(gemini(server, "gemini-2.0-flash"))
    with_tools = ModelRequest(
        system_prompt="",
        messages=[UserMessage(text="read")],
        tools=[TOOL],
        response_schema=PLAN_SCHEMA,
    )
    await collect(gemini(server, "gemini-2.0-flash"), with_tools)
    for request in server.requests:
        config = request.json().get("generationConfig", {})
        assert "responseMimeType" not in config and "responseJsonSchema" not in config
    assert "tools" in server.requests[1].json()


# ---------------------------------------------------------------------------- Vertex AI

VERTEX_PATH = "/v1beta1/projects/test-project/locations/us-central1/publishers/google/models"
DEAD_URL = "http://127.0.0.1:9"  # nothing listens there: a request sent to it fails


@pytest.fixture
def vertex_env(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> pytest.MonkeyPatch:
    """Vertex AI mode from the environment, its endpoint and token endpoint the fake server,
    and a Gemini API endpoint (and key) that must not be used."""
    key_file = g.service_account(tmp_path / "sa.json", token_uri=f"{server.url}/token")
    for name in ("DEFAULT_MODEL", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    values = {
        "GOOGLE_GENAI_USE_VERTEXAI": "true",
        "GOOGLE_CLOUD_PROJECT": "test-project",
        "GOOGLE_CLOUD_LOCATION": "us-central1",
        "GOOGLE_VERTEX_BASE_URL": server.url,
        "GOOGLE_GEMINI_BASE_URL": DEAD_URL,
        "GEMINI_API_KEY": KEY,
        "GOOGLE_APPLICATION_CREDENTIALS": str(key_file),
        "MODEL_MAX_RETRIES": "0",
        "MODEL_RETRY_INITIAL_DELAY_SECONDS": "0.01",
        "MODEL_RETRY_MAX_DELAY_SECONDS": "0.05",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return monkeypatch


async def test_vertex_uses_its_own_base_url_and_adc(
    server: FakeServer, vertex_env: pytest.MonkeyPatch
) -> None:
    server.script(
        g.token("ya29.vertex"),
        g.stream(
            g.chunk(g.text("Weighing it.", thought=True)),
            g.chunk(g.text("From Vertex."), finish="STOP", usage=(9, 3, 2)),
        ),
        JsonReply(200, {"totalTokens": 17}),
    )
    settings = Settings(_env_file=None)
    assert settings.default_model == "gemini-2.5-flash"  # Vertex AI alone makes Gemini the default
    model = ModelRegistry.from_settings(settings).resolve("default")
    events = await collect(model)
    assert events == [ThinkingDelta("Weighing it."), TextDelta("From Vertex."), Usage(9, 5)]

    request = ModelRequest(
        system_prompt="Be brief.", messages=[UserMessage(text="hi")], tools=[TOOL]
    )
    assert await model.count_tokens(request) == 17  # Vertex AI counts prompt and tools itself

    token, generate, count = server.requests
    assert (token.method, token.path) == ("POST", "/token")
    assert b"assertion=" in token.body
    assert generate.path == f"{VERTEX_PATH}/gemini-2.5-flash:streamGenerateContent"
    assert count.path == f"{VERTEX_PATH}/gemini-2.5-flash:countTokens"
    for sent in (generate, count):
        assert sent.headers["authorization"] == "Bearer ya29.vertex"  # the token, once fetched
        assert "x-goog-api-key" not in sent.headers  # the Gemini API key is not Vertex's
    body = count.json()
    assert body["systemInstruction"]["parts"] == [{"text": "Be brief."}]
    assert body["tools"][0]["functionDeclarations"][0]["name"] == "read_file"
    assert [c["parts"][0]["text"] for c in body["contents"]] == ["hi"]


async def test_gemini_api_mode_ignores_the_vertex_base_url(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_VERTEX_BASE_URL", DEAD_URL)
    server.script(g.answer("from the Gemini API"))
    model = gemini(server, google_vertex_base_url=DEAD_URL)
    assert final_text(await collect(model)) == "from the Gemini API"
    [request] = server.requests
    assert request.path.endswith("/models/gemini-2.5-flash:streamGenerateContent")
    assert "/projects/" not in request.path and request.headers["x-goog-api-key"] == KEY


async def test_vertex_credentials_refused_fail_fast(
    server: FakeServer, vertex_env: pytest.MonkeyPatch
) -> None:
    vertex_env.setenv("MODEL_MAX_RETRIES", "2")
    refused = {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
    server.script(JsonReply(400, refused), g.answer("never"))
    model = ModelRegistry.from_settings(Settings(_env_file=None)).resolve("gemini-2.5-pro")
    with pytest.raises(ModelError) as info:
        await collect(model)
    assert info.value.code == "model_auth_failed"
    assert "invalid_grant" in info.value.message and "credentials" in info.value.message
    assert [r.path for r in server.requests] == ["/token"]
