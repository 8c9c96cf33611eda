"""OpenTelemetry traces: one trace from the HTTP request through the queue to the model and tool
calls of the run it posted.

`configure_tracing` installs the SDK with an OTLP/HTTP exporter only when
OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set; the exporter reads
the other standard OTEL_* variables itself (headers, timeout, OTEL_SERVICE_NAME,
OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER). Otherwise the API's no-op tracer is used: spans
cost a function call and nothing is recorded or sent.

The queue carries the trace: `current_trace_context` is the W3C `traceparent` (and
`tracestate`) of the span active when a run is enqueued, stored with the run
(`agent_run_queue.trace_context`); the worker's `run_span` continues that trace. Model calls
(`model_span`) and tool calls (`tool_span`) are children of the run span, with attributes from
the OpenTelemetry GenAI semantic conventions. Never message text, arguments, results or secrets:
only names, ids and counts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from app.config import Settings

TRACER_NAME = "agent_runtime"
_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_configured = False


def tracing_requested(settings: Settings) -> bool:
    """Whether an OTLP endpoint is configured (settings or the standard variables)."""
    env = any(os.environ.get(name, "").strip() for name in _ENDPOINT_VARS)
    return env or bool(settings.otel_exporter_otlp_endpoint)


def configure_tracing(settings: Settings, service_name: str) -> bool:
    """Install the SDK and its OTLP/HTTP exporter when an endpoint is configured; True if it did.

    OTEL_SERVICE_NAME wins over `service_name` (`agent-runtime-api`, `agent-runtime-worker`).
    Idempotent per process.
    """
    global _configured
    if _configured or not tracing_requested(settings):
        return _configured
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({SERVICE_NAME: settings.otel_service_name or service_name})
    endpoint = None
    if not any(os.environ.get(name, "").strip() for name in _ENDPOINT_VARS):
        # from .env only (the exporter reads os.environ itself): the same path it would append
        endpoint = f"{str(settings.otel_exporter_otlp_endpoint).rstrip('/')}/v1/traces"
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    _configured = True
    return True


def tracing_enabled() -> bool:
    """Whether spans are recorded in this process: an SDK tracer provider is installed (by
    `configure_tracing`, or by a test). The HTTP instrumentation is only added then."""
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def shutdown_tracing() -> None:
    """Flush and stop the exporter (process exit); nothing when tracing is off."""
    provider = trace.get_tracer_provider()
    shutdown = getattr(provider, "shutdown", None)
    if _configured and callable(shutdown):
        shutdown()


def _tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


@contextmanager
def _span(
    name: str,
    kind: SpanKind,
    attributes: dict[str, Any],
    context: Any = None,
    not_errors: tuple[type[BaseException], ...] = (),
) -> Iterator[Span]:
    """A current span that records a failure as its exception's type only: the SDK's default
    would put the exception's message (which may quote content) on the span. `not_errors`:
    exceptions that suspend rather than fail (a call parking its run)."""
    with _tracer().start_as_current_span(
        name,
        context=context,
        kind=kind,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except not_errors:
            raise
        except Exception as exc:
            set_error(span, type(exc).__name__)
            raise


def current_trace_context() -> dict[str, str] | None:
    """The active span's W3C trace context (`traceparent`, maybe `tracestate`), or None when no
    span is recording (tracing off): what is stored with an enqueued run."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {k: v for k, v in carrier.items() if k in ("traceparent", "tracestate")} or None


@contextmanager
def run_span(
    trace_context: Mapping[str, Any] | None,
    *,
    run_id: str,
    agent_id: str,
    session_id: str,
    attempt: int,
) -> Iterator[Span]:
    """The worker's span of one claim of a run (`invoke_agent`), a child of the request that
    enqueued it when its trace context was stored."""
    carrier = {str(k): str(v) for k, v in (trace_context or {}).items()}
    parent = propagate.extract(carrier) if carrier else None
    with _span(
        "invoke_agent",
        SpanKind.CONSUMER,
        context=parent,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.id": agent_id,
            "gen_ai.conversation.id": session_id,
            "agent_runtime.run.id": run_id,
            "agent_runtime.run.attempt": attempt,
        },
    ) as span:
        yield span


@contextmanager
def model_span(provider: str, model: str) -> Iterator[Span]:
    """One model call (`chat {model}`); the caller adds `set_usage` when the provider reports it."""
    with _span(
        f"chat {model}",
        SpanKind.CLIENT,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.system": provider,  # the name before semantic conventions 1.37
            "gen_ai.request.model": model,
        },
    ) as span:
        yield span


def set_usage(span: Span, input_tokens: int, output_tokens: int) -> None:
    """The call's token usage on its span."""
    span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", output_tokens)


@contextmanager
def tool_span(
    tool: str, call_id: str, parks: tuple[type[BaseException], ...] = ()
) -> Iterator[Span]:
    """One tool call (`execute_tool {tool}`); `tool` is the bounded name; `parks`: exceptions
    by which a call suspends its run (not failures)."""
    with _span(
        f"execute_tool {tool}",
        SpanKind.INTERNAL,
        not_errors=parks,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
        },
    ) as span:
        yield span


def set_error(span: Span, error_type: str) -> None:
    """Mark the span failed with a short, content-free `error.type` (a code, not a message)."""
    if (getattr(span, "attributes", None) or {}).get("error.type") is not None:
        return  # the caller already named the failure more precisely
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR))
