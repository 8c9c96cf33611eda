"""Gemini models (`gemini-…`, `models/gemini-…`) through the `google-genai` SDK.

Configured by `GEMINI_API_KEY` (or `GOOGLE_API_KEY`), or by `GOOGLE_GENAI_USE_VERTEXAI=true` with
`GOOGLE_CLOUD_PROJECT` and `GOOGLE_CLOUD_LOCATION` (Vertex AI, Application Default Credentials).
Each mode honours google-genai's own endpoint variable: `GOOGLE_GEMINI_BASE_URL` points the
Gemini API elsewhere, `GOOGLE_VERTEX_BASE_URL` Vertex AI (a proxy or gateway; the tests' fake
server). When Gemini is configured and `DEFAULT_MODEL` is not set, it is the default model
(`Settings.default_model`).

One call is `client.aio.models.generate_content_stream`:

* the request: the system prompt as `system_instruction`; our tools as function declarations
  (their JSON schema as `parameters_json_schema`); the transcript as contents (see
  `gemini_contents.py`); thought summaries requested (`include_thoughts`) from models that think
  (2.5 and later) when `GEMINI_INCLUDE_THOUGHTS` is on; structured output (`response_mime_type=
  "application/json"` + `response_json_schema`) when the request has a `response_schema` and no
  tools (Gemini 2.x cannot combine the two); the SDK's automatic function calling and its own
  retries off;
* the stream: text parts → `TextDelta`, thought parts → `ThinkingDelta`, function-call parts →
  `ToolCallEvent` (when the stream has completed), `usage_metadata` → `Usage` (output tokens
  include thinking tokens);
* failures: a blocked prompt or a safety finish → `model_safety_block`; a malformed function call
  or a stream that ends without a finish reason is retried; HTTP errors as in `failures.py`.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import AsyncIterator, Hashable
from functools import partial
from typing import Any

from google import genai
from google.auth import exceptions as auth_errors
from google.genai import errors as genai_errors
from google.genai import types

from app.config import Settings
from app.core.transcript import ToolCall
from app.llm.base import (
    Model,
    ModelError,
    ModelEvent,
    ModelRequest,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    Usage,
)
from app.llm.clients import SharedClient, connection_limits
from app.llm.failures import (
    AUTH_FAILED,
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
from app.llm.gemini_contents import SignatureCache, to_contents
from app.llm.provider_names import GEMINI_HINT, GEMINI_PREFIXES, gemini_configured
from app.llm.retry import RetryPolicy, closing, stream_with_retries

PROVIDER = "Gemini"
PREFIXES = GEMINI_PREFIXES
HINT = GEMINI_HINT
SAFETY_FINISH = frozenset(
    {
        "SAFETY",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "RECITATION",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)
RETRY_FINISH = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"})
_VERSION = re.compile(r"^(?:models/)?gemini-(\d+)(?:\.(\d+))?")


def thinks(model: str) -> bool:
    """Whether `model` is a thinking model (Gemini 2.5 or later, by its name)."""
    m = _VERSION.match(model)
    return m is not None and (int(m.group(1)), int(m.group(2) or 0)) >= (2, 5)


def configured(settings: Settings) -> bool:
    """Whether the settings enable Gemini (an API key, or Vertex AI with project and location)."""
    return gemini_configured(settings)


def factory(settings: Settings, policy: RetryPolicy) -> partial[GeminiModel]:
    """Builds `GeminiModel`s that share one client (per event loop) for these settings."""
    return partial(GeminiModel, client=shared_client(settings), policy=policy, settings=settings)


def shared_client(settings: Settings) -> SharedClient[genai.Client]:
    """The `genai.Client` for these settings, with the SDK's retries off, our timeout and a
    connection pool for every run of the worker (`connection_limits`).

    The endpoint is `GOOGLE_VERTEX_BASE_URL` in Vertex AI mode and `GOOGLE_GEMINI_BASE_URL`
    otherwise (as google-genai itself reads them from the environment; here they may also come
    from `.env`); unset, the SDK's default endpoint for the mode.
    """
    key = _api_key(settings)
    vertex = settings.google_genai_use_vertexai
    base_url = settings.google_vertex_base_url if vertex else settings.google_gemini_base_url
    options = types.HttpOptions(
        base_url=base_url or None,
        timeout=math.ceil(settings.model_request_timeout_seconds * 1000),
        retry_options=types.HttpRetryOptions(attempts=1),  # ours is the only retry policy
    )
    limits = connection_limits(settings)
    config: Hashable = (
        "gemini",
        key,
        vertex,
        settings.google_cloud_project,
        settings.google_cloud_location,
        options.model_dump_json(),
        limits.max_connections,
    )
    # After the key is taken: the limits object is not JSON.
    options.async_client_args = {"limits": limits}

    def build() -> genai.Client:
        if vertex:
            return genai.Client(
                vertexai=True,
                project=settings.google_cloud_project,
                location=settings.google_cloud_location,
                http_options=options,
            )
        return genai.Client(vertexai=False, api_key=key, http_options=options)

    return SharedClient(config, build)


def _api_key(settings: Settings) -> str | None:
    """The first non-empty of GEMINI_API_KEY and GOOGLE_API_KEY (stripped), if any."""
    for secret in (settings.gemini_api_key, settings.google_api_key):
        if secret is not None and (value := secret.get_secret_value().strip()):
            return value
    return None


class GeminiModel(Model):
    """A Gemini model, streamed with our retry policy."""

    def __init__(
        self,
        name: str,
        *,
        client: SharedClient[genai.Client],
        policy: RetryPolicy,
        settings: Settings,
    ) -> None:
        self.name = name
        self._client = client
        self._policy = policy
        self._thoughts = settings.gemini_include_thoughts and thinks(name)
        self._vertex = settings.google_genai_use_vertexai
        self._secrets = (_api_key(settings),)
        self._signatures = SignatureCache()

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream the answer to `request`, retrying transient failures."""
        return stream_with_retries(partial(self._attempt, request), self._policy)

    async def count_tokens(self, request: ModelRequest) -> int:
        """Input tokens by the API's `countTokens` (one attempt, no retries).

        The Gemini API counts contents only: there the system prompt is counted as a leading
        user turn, and the tool declarations are estimated (`ceil(characters / 4)`). Vertex AI
        counts all three itself.
        """
        contents = to_contents(request.messages, self._signatures, model=self.name)
        config: types.CountTokensConfig | None = None
        extra = 0
        if self._vertex:
            config = types.CountTokensConfig(
                system_instruction=request.system_prompt or None, tools=_tools(request) or None
            )
        else:
            if request.system_prompt:
                system = types.Content(role="user", parts=[types.Part(text=request.system_prompt)])
                contents.insert(0, system)
            if request.tools:
                specs = [[t.name, t.description, t.parameters] for t in request.tools]
                extra = math.ceil(len(json.dumps(specs)) / 4)
        try:
            counted = await self._client.get().aio.models.count_tokens(
                model=self.name, contents=contents, config=config
            )
        except Exception as exc:
            failure = self._failure(exc)
            if isinstance(failure, TransientModelError):
                raise ModelError(failure.code, failure.reason) from exc
            raise failure from exc
        return (counted.total_tokens or 0) + extra

    async def _attempt(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        calls: list[ToolCall] = []
        usage: types.GenerateContentResponseUsageMetadata | None = None
        finished = False
        try:
            chunks = await self._client.get().aio.models.generate_content_stream(
                model=self.name,
                contents=to_contents(request.messages, self._signatures, model=self.name),
                config=self._config(request),
            )
            async with closing(chunks) as stream:
                async for chunk in stream:
                    _check_prompt(chunk)
                    usage = chunk.usage_metadata or usage
                    candidate = chunk.candidates[0] if chunk.candidates else None
                    if candidate is None:
                        continue
                    parts = candidate.content.parts if candidate.content else None
                    for part in parts or ():
                        if part.function_call is not None:
                            calls.append(self._call(part, first=not calls))
                        elif part.text:
                            yield ThinkingDelta(part.text) if part.thought else TextDelta(part.text)
                    if candidate.finish_reason is not None:
                        finished = True
                        _check_finish(candidate)
        except (ModelError, TransientModelError):
            raise
        except Exception as exc:
            raise self._failure(exc) from exc
        if not finished:
            raise stream_cut_short(PROVIDER)
        for call in calls:
            yield ToolCallEvent(call)
        if usage is not None:
            yield Usage(
                input_tokens=usage.prompt_token_count or 0,
                output_tokens=(usage.candidates_token_count or 0)
                + (usage.thoughts_token_count or 0),
            )

    def _config(self, request: ModelRequest) -> types.GenerateContentConfig:
        tools = _tools(request)
        # Gemini 2.x rejects JSON mode combined with function calling; plan requests send no
        # tools, and a request with both keeps the tools (the caller validates the text anyway).
        structured = request.response_schema is not None and not tools
        return types.GenerateContentConfig(
            system_instruction=request.system_prompt or None,
            tools=tools or None,
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            thinking_config=types.ThinkingConfig(include_thoughts=True) if self._thoughts else None,
            response_mime_type="application/json" if structured else None,
            response_json_schema=request.response_schema if structured else None,
        )

    def _call(self, part: types.Part, *, first: bool) -> ToolCall:
        fc = part.function_call
        assert fc is not None
        call = ToolCall(
            id=fc.id or f"call_{uuid.uuid4().hex[:16]}", name=fc.name or "", args=fc.args or {}
        )
        self._signatures.remember(call.id, part.thought_signature, first=first)
        return call

    def _failure(self, exc: Exception) -> ModelError | TransientModelError:
        if isinstance(exc, genai_errors.APIError):
            reason = scrub(_api_reason(exc), self._secrets)
            headers = getattr(getattr(exc, "response", None), "headers", None)
            retry_after = parse_retry_after(headers) or _retry_info(exc.details)
            return http_failure(PROVIDER, exc.code or 0, reason, retry_after=retry_after)
        if isinstance(exc, auth_errors.GoogleAuthError):  # Vertex AI: ADC and token refresh
            return _auth_failure(exc)
        if (transient := network_failure(PROVIDER, exc)) is not None:
            return transient
        return unexpected_failure(PROVIDER, exc)


def _auth_failure(exc: auth_errors.GoogleAuthError) -> ModelError | TransientModelError:
    """Credentials that could not be found or refreshed (Vertex AI): a token endpoint out of
    reach, or one that asks us to retry, is transient; anything else needs new credentials."""
    if isinstance(exc, auth_errors.TransportError) or getattr(exc, "retryable", False):
        return connection_failure(PROVIDER, exc)
    return ModelError(AUTH_FAILED, f"{PROVIDER}: Google credentials failed: {exc}")


def _declarations(request: ModelRequest) -> list[types.FunctionDeclaration]:
    return [
        types.FunctionDeclaration(
            name=t.name, description=t.description, parameters_json_schema=t.parameters
        )
        for t in request.tools
    ]


def _tools(request: ModelRequest) -> list[types.Tool]:
    declarations = _declarations(request)
    return [types.Tool(function_declarations=declarations)] if declarations else []


def _check_prompt(chunk: types.GenerateContentResponse) -> None:
    feedback = chunk.prompt_feedback
    if feedback is not None and feedback.block_reason is not None:
        why = _enum(feedback.block_reason)
        detail = f": {feedback.block_reason_message}" if feedback.block_reason_message else ""
        raise ModelError(SAFETY_BLOCK, f"{PROVIDER} blocked the prompt ({why}){detail}")


def _check_finish(candidate: types.Candidate) -> None:
    reason = _enum(candidate.finish_reason)
    if reason in SAFETY_FINISH:
        blocked = [_enum(r.category) for r in candidate.safety_ratings or () if r.blocked]
        detail = f"; blocked: {', '.join(blocked)}" if blocked else ""
        message = f": {candidate.finish_message}" if candidate.finish_message else ""
        raise ModelError(
            SAFETY_BLOCK, f"{PROVIDER} stopped the answer (finish reason {reason}{detail}){message}"
        )
    if reason in RETRY_FINISH:
        raise TransientModelError(
            UNAVAILABLE_TRANSIENT, f"{PROVIDER}: the model produced an invalid call ({reason})"
        )


def _enum(value: Any) -> str:
    return str(getattr(value, "value", value))


def _api_reason(exc: genai_errors.APIError) -> str:
    status = f"{exc.status}: " if exc.status else ""
    return f"{status}{exc.message or exc.details}"


def _retry_info(details: Any) -> float | None:
    """The `RetryInfo.retryDelay` (e.g. `"37s"`) Google APIs put in 429 error details."""
    error = details.get("error", details) if isinstance(details, dict) else None
    for item in error.get("details", []) if isinstance(error, dict) else []:
        delay = item.get("retryDelay") if isinstance(item, dict) else None
        if isinstance(delay, str) and delay.endswith("s"):
            try:
                return float(delay[:-1])
            except ValueError:
                return None
    return None
