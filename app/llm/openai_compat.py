"""`openai:<model>`: any server speaking OpenAI's Chat Completions API, through the `openai` SDK.

OpenAI itself, or vLLM, Ollama, llama.cpp, NIM, … at `OPENAI_BASE_URL`. Configured by
`OPENAI_API_KEY` or `OPENAI_BASE_URL` (local servers often need no key). The model sent is the
name after `openai:`.

One call is `chat.completions.create(stream=True, stream_options={"include_usage": True})`:

* the request: the system prompt as a `system` message; the transcript as `user`, `assistant`
  (`content` + `tool_calls`) and `tool` messages (`tool_call_id`; content is the result as text
  or JSON, or `{"error": …}`); our tools as `function` tools; a `response_schema` (plan
  requests, which send no tools) as `response_format={"type": "json_schema", "json_schema":
  {"name": "plan", "schema": …, "strict": false}}` unless `OPENAI_STRUCTURED_OUTPUT` is off.
  A server that answers that with a 400/422 naming `response_format` or `json_schema` gets the
  same request once more without it, and this model sends no `response_format` from then on;
  the SDK's retries off;
* the stream: `content` → `TextDelta`; `reasoning_content` (vLLM, DeepSeek) or `reasoning`
  (Ollama, OpenRouter) → `ThinkingDelta`; `tool_calls` fragments are assembled by `index` into
  complete calls, yielded when the stream has completed (arguments that are not a JSON object
  become `{"_raw": "<the text>"}`, which the tool registry then rejects back to the model); the
  final chunk's `usage` → `Usage`;
* failures: `finish_reason: content_filter` → `model_safety_block`; a stream that ends without a
  finish reason is retried; HTTP and connection errors as in `failures.py`.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Hashable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import structlog
from openai import (
    APIConnectionError,
    APIError,
    APIStatusError,
    AsyncOpenAI,
    AsyncStream,
    DefaultAsyncHttpxClient,
)
from openai.types.chat import ChatCompletionChunk

from app.config import Settings
from app.core.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage
from app.llm.base import (
    Message,
    Model,
    ModelError,
    ModelEvent,
    ModelRequest,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    ToolSpec,
    Usage,
)
from app.llm.clients import SharedClient, connection_limits
from app.llm.failures import (
    CONTEXT_TOO_LONG,
    SAFETY_BLOCK,
    UNAVAILABLE_TRANSIENT,
    TransientModelError,
    connection_failure,
    http_failure,
    network_failure,
    parse_retry_after,
    scrub,
    stream_cut_short,
    unexpected_failure,
)
from app.llm.provider_names import OPENAI_HINT, OPENAI_PREFIX, openai_configured
from app.llm.retry import RetryPolicy, closing, stream_with_retries

PROVIDER = "OpenAI-compatible server"
PREFIX = OPENAI_PREFIX
HINT = OPENAI_HINT
NO_KEY = "unused"
"""The API key sent when only `OPENAI_BASE_URL` is set (the SDK insists on one)."""
_REJECTS_FORMAT = re.compile(r"response.?format|json.?schema", re.IGNORECASE)

log = structlog.get_logger(__name__)


def configured(settings: Settings) -> bool:
    """Whether the settings enable `openai:` models (an API key or a base URL)."""
    return openai_configured(settings)


def factory(settings: Settings, policy: RetryPolicy) -> partial[OpenAIModel]:
    """Builds `OpenAIModel`s that share one client (per event loop) for these settings."""
    return partial(OpenAIModel, client=shared_client(settings), policy=policy, settings=settings)


def shared_client(settings: Settings) -> SharedClient[AsyncOpenAI]:
    """The `AsyncOpenAI` client for these settings, with the SDK's retries off and a connection
    pool for every run of the worker (`connection_limits`)."""
    key = _api_key(settings)
    base_url = settings.openai_base_url or None
    timeout = settings.model_request_timeout_seconds
    limits = connection_limits(settings)
    config: Hashable = ("openai", key, base_url, timeout, limits.max_connections)
    return SharedClient(
        config,
        lambda: AsyncOpenAI(
            api_key=key,
            base_url=base_url,
            timeout=timeout,
            max_retries=0,
            # The SDK's HTTP library may be httpx's fork httpx2 (openai 3), which reads the
            # same four attributes of an `httpx.Limits`.
            http_client=DefaultAsyncHttpxClient(limits=cast(Any, limits)),
        ),
    )


def _api_key(settings: Settings) -> str:
    secret = settings.openai_api_key
    return secret.get_secret_value() if secret is not None else NO_KEY


class OpenAIModel(Model):
    """A model behind an OpenAI-compatible Chat Completions endpoint."""

    def __init__(
        self,
        name: str,
        *,
        client: SharedClient[AsyncOpenAI],
        policy: RetryPolicy,
        settings: Settings,
    ) -> None:
        self.name = name
        self.model = name.removeprefix(PREFIX)
        """The model name sent to the server."""
        self._client = client
        self._policy = policy
        self._secrets = (_api_key(settings),)
        self._structured = settings.openai_structured_output
        """Whether to send `response_format` for a `response_schema` (off once rejected)."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream the answer to `request`, retrying transient failures."""
        return stream_with_retries(partial(self._attempt, request), self._policy)

    async def _attempt(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        calls = _CallAssembler()
        usage: Usage | None = None
        finish: str | None = None
        try:
            chunks = await self._open(request)
            async with closing(chunks) as stream:
                async for chunk in stream:
                    if chunk.usage is not None:
                        used = chunk.usage
                        usage = Usage(used.prompt_tokens or 0, used.completion_tokens or 0)
                    for choice in chunk.choices or ():
                        if choice.index != 0:
                            continue
                        finish = choice.finish_reason or finish
                        if (delta := choice.delta) is None:  # some servers send none at the end
                            continue
                        if thinking := _reasoning(delta):
                            yield ThinkingDelta(thinking)
                        if delta.content:
                            yield TextDelta(delta.content)
                        for fragment in delta.tool_calls or ():
                            calls.add(fragment)
        except (ModelError, TransientModelError):
            raise
        except Exception as exc:
            raise self._failure(exc) from exc
        if finish is None:
            raise stream_cut_short(PROVIDER)
        if finish == "content_filter":
            raise ModelError(SAFETY_BLOCK, f"{PROVIDER} stopped the answer (content_filter)")
        for call in calls.complete():
            yield ToolCallEvent(call)
        if usage is not None:
            yield usage

    async def _open(self, request: ModelRequest) -> AsyncStream[ChatCompletionChunk]:
        """Start the streamed call: with `response_format` when wanted, and once more without
        it when the server rejects it."""
        structured = self._structured and request.response_schema is not None and not request.tools
        try:
            return await self._create(request, structured=structured)
        except APIStatusError as exc:
            if not (structured and _rejects_response_format(exc)):
                raise
            self._structured = False
            reason = scrub(_reason(exc), self._secrets)
            log.warning("response_format rejected; sent without it", model=self.name, reason=reason)
        return await self._create(request, structured=False)

    async def _create(
        self, request: ModelRequest, *, structured: bool
    ) -> AsyncStream[ChatCompletionChunk]:
        tools = to_tools(request.tools)
        optional: dict[str, Any] = {"tools": tools} if tools else {}
        if structured:
            optional["response_format"] = response_format(request)
        chunks: AsyncStream[ChatCompletionChunk] = await self._client.get().chat.completions.create(
            model=self.model,
            messages=cast(Any, to_messages(request.system_prompt, request.messages)),
            stream=True,
            stream_options={"include_usage": True},
            **optional,
        )
        return chunks

    def _failure(self, exc: Exception) -> ModelError | TransientModelError:
        if isinstance(exc, APIStatusError):
            reason = scrub(_reason(exc), self._secrets)
            if _error_code(exc.body) == "context_length_exceeded":
                return ModelError(CONTEXT_TOO_LONG, f"{PROVIDER} HTTP {exc.status_code}: {reason}")
            retry_after = parse_retry_after(exc.response.headers)
            return http_failure(PROVIDER, exc.status_code, reason, retry_after=retry_after)
        if isinstance(exc, APIConnectionError):  # includes APITimeoutError
            return connection_failure(PROVIDER, exc)
        if (transient := network_failure(PROVIDER, exc)) is not None:
            return transient
        if isinstance(exc, APIError):  # an error event inside the stream
            reason = scrub(_reason(exc), self._secrets)
            status = _error_code(exc.body)
            if isinstance(status, int) or (isinstance(status, str) and status.isdigit()):
                return http_failure(PROVIDER, int(status), reason)
            return TransientModelError(UNAVAILABLE_TRANSIENT, f"{PROVIDER}: {reason}")
        return unexpected_failure(PROVIDER, exc)


def response_format(request: ModelRequest) -> dict[str, Any]:
    """The request's `response_schema` as a (non-strict) `json_schema` response format.

    Not strict: OpenAI's strict mode accepts only a subset of JSON Schema (every property
    required, no `pattern`/`minLength`, …), and the caller validates the answer anyway.
    """
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "plan" if request.purpose == "plan" else "answer",
            "schema": request.response_schema,
            "strict": False,
        },
    }


def _rejects_response_format(exc: APIStatusError) -> bool:
    """A 400/422 that names `response_format` or `json_schema`: the server does not support it."""
    return exc.status_code in (400, 422) and bool(_REJECTS_FORMAT.search(_reason(exc)))


def to_tools(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Our tool specs as Chat Completions `function` tools."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in specs
    ]


def to_messages(system_prompt: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The system prompt and transcript as Chat Completions messages."""
    out: list[dict[str, Any]] = (
        [{"role": "system", "content": system_prompt}] if system_prompt else []
    )
    for m in messages:
        if isinstance(m, UserMessage):
            out.append({"role": "user", "content": m.text})
        elif isinstance(m, AssistantMessage):
            out.append(_assistant(m))
        elif isinstance(m, ToolResult):
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": _content(m)})
    return out


def _assistant(m: AssistantMessage) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": m.text or None}
    if m.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.args)},
            }
            for c in m.tool_calls
        ]
    return message


def _content(result: ToolResult) -> str:
    if not result.ok:
        return json.dumps({"error": result.error or "failed"})
    return result.result if isinstance(result.result, str) else json.dumps(result.result)


def _reasoning(delta: Any) -> str | None:
    for attr in ("reasoning_content", "reasoning"):
        value = getattr(delta, attr, None)
        if isinstance(value, str) and value:
            return value
    return None


def _reason(exc: APIError) -> str:
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return exc.message


def _error_code(body: object) -> Any:
    return body.get("code") if isinstance(body, dict) else None


@dataclass(slots=True)
class _PartialCall:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class _CallAssembler:
    """Tool calls streamed as fragments (id and name first, arguments in pieces) by `index`."""

    def __init__(self) -> None:
        self._calls: dict[int, _PartialCall] = {}

    def add(self, fragment: Any) -> None:
        """Add one `delta.tool_calls[]` item."""
        index = getattr(fragment, "index", None)
        if not isinstance(index, int):  # servers that omit it send each call whole
            index = len(self._calls)
        call = self._calls.setdefault(index, _PartialCall())
        call.id = call.id or getattr(fragment, "id", None)
        function = getattr(fragment, "function", None)
        if function is not None:
            call.name = call.name or function.name or ""
            call.arguments.append(function.arguments or "")

    def complete(self) -> list[ToolCall]:
        """The assembled calls, in index order."""
        return [
            ToolCall(
                id=c.id or f"call_{uuid.uuid4().hex[:16]}",
                name=c.name,
                args=parse_args("".join(c.arguments)),
            )
            for _, c in sorted(self._calls.items())
        ]


def parse_args(raw: str) -> dict[str, Any]:
    """Streamed arguments: a JSON object, `{}` when empty, else `{"_raw": "<the text>"}`."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}
