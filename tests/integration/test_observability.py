"""Metrics and traces of a real run: POST → worker → model and tool calls, on real Postgres.

Traces use the SDK's in-memory exporter, installed as this process's tracer provider (once: the
global provider cannot be replaced); the HTTP app is instrumented because a provider is set
before it is created. Metrics are read from the process's default registry and through
`GET /metrics` (parsed with prometheus_client's parser).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from app.auth.principal import Principal
from app.db.engine import Database
from app.db.models import Run
from app.observability.tracing import tracing_enabled
from tests.integration.api_support import Api, auth, error_of, make_settings, running_api
from tests.integration.policy_support import running_worker, worker_settings

pytestmark = pytest.mark.timeout(60)

MARKER = "zebra-7f3c-marker"
"""Text of the user's message and of the tool's arguments: it must be in no span attribute."""
MESSAGE = f'{MARKER}\n/tool list_files {{"path": "{MARKER}"}}\n/tool no_such_tool'

_exporter = InMemorySpanExporter()


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    """The in-memory exporter behind this process's tracer provider."""
    if not tracing_enabled():
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    _exporter.clear()
    yield _exporter
    _exporter.clear()


@pytest.fixture
async def api(spans: InMemorySpanExporter, database: Database, db_url: str) -> AsyncIterator[Api]:
    async with running_api(make_settings(db_url), database) as api:
        yield api


async def run_to_end(api: Api, database: Database, db_url: str, message: str = MESSAGE) -> str:
    """POST a run and let a real worker (offline model, default catalog) finish it."""
    async with running_worker(database, worker_settings(db_url), "obs-worker"):
        run = await api.post_run(message)
        deadline = time.monotonic() + 20
        while True:
            r = await api.client.get(
                "/api/agent-runtime/status", params={"runId": run["runId"]}, headers=auth()
            )
            if r.json()["status"] in ("completed", "failed"):
                break
            assert time.monotonic() < deadline, r.text
            await asyncio.sleep(0.05)
    assert r.json()["status"] == "completed", r.text
    return str(run["runId"])


def in_trace(spans: InMemorySpanExporter, trace_id: int) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.context and s.context.trace_id == trace_id]


def named(found: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in found if s.name.startswith(prefix)]


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent else None


async def test_one_trace_from_the_request_through_the_queue_to_model_and_tool_calls(
    api: Api, database: Database, db_url: str, alice: Principal, spans: InMemorySpanExporter
) -> None:
    run_id = await run_to_end(api, database, db_url)

    [post] = [
        s
        for s in spans.get_finished_spans()
        if s.kind == SpanKind.SERVER and s.name == "POST /api/agent-runtime"
    ]
    assert post.context is not None
    found = in_trace(spans, post.context.trace_id)
    [run] = named(found, "invoke_agent")
    chats = named(found, "chat ")
    [tool] = named(found, "execute_tool ")

    # the queue carried the request's context: the worker's run span is the request's child
    assert run.context is not None and parent_id(run) == post.context.span_id
    assert run.kind == SpanKind.CONSUMER
    assert len(chats) == 2  # the turn that calls the tools, the turn that reads their results
    assert all(parent_id(c) == run.context.span_id for c in chats)
    assert parent_id(tool) == run.context.span_id
    async with database.tenant(alice) as s:
        stored = await s.scalar(select(Run.trace_context).where(Run.id == run_id))
    assert stored is not None and f"{post.context.trace_id:032x}" in stored["traceparent"]

    # GenAI semantic conventions
    assert run.attributes is not None and run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["agent_runtime.run.id"] == run_id
    for chat in chats:
        attrs = dict(chat.attributes or {})
        assert chat.name == "chat offline" and chat.kind == SpanKind.CLIENT
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.provider.name"] == "offline"
        assert attrs["gen_ai.request.model"] == "offline"
        assert isinstance(attrs["gen_ai.usage.input_tokens"], int)
        assert attrs["gen_ai.usage.input_tokens"] > 0
        assert attrs["gen_ai.usage.output_tokens"] > 0
    tool_attrs = dict(tool.attributes or {})
    assert tool.name == "execute_tool list_files"
    assert tool_attrs["gen_ai.operation.name"] == "execute_tool"
    assert tool_attrs["gen_ai.tool.name"] == "list_files"
    assert tool_attrs["gen_ai.tool.call.id"]
    # the unknown tool was refused by the policy, not executed: no span of its own
    assert not named(found, "execute_tool other") and not named(found, "execute_tool no_such")

    # never content: neither the message nor the tool's arguments, in any span of the trace
    for span in found:
        for value in (span.attributes or {}).values():
            assert MARKER not in str(value), (span.name, value)
        assert MARKER not in span.name
        assert not span.events, (span.name, span.events)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_counters_move_after_a_run_and_the_scrape_shows_them(
    api: Api, database: Database, db_url: str
) -> None:
    before = {
        "ok": sample("agent_runtime_tool_calls_total", tool="list_files", outcome="ok"),
        "refused": sample("agent_runtime_tool_calls_total", tool="other", outcome="refused"),
        "runs": sample("agent_runtime_run_duration_seconds_count", outcome="completed"),
        "model": sample(
            "agent_runtime_model_call_duration_seconds_count",
            provider="offline",
            model="offline",
            outcome="ok",
        ),
        "input": sample(
            "agent_runtime_model_tokens_total", provider="offline", model="offline", type="input"
        ),
        "wait": sample("agent_runtime_run_queue_wait_seconds_count"),
        "claims": sample("agent_runtime_claim_duration_seconds_count", result="claimed"),
    }
    await run_to_end(api, database, db_url)

    assert sample("agent_runtime_tool_calls_total", tool="list_files", outcome="ok") == (
        before["ok"] + 1
    )
    # a name the model made up is not a label value of its own
    assert sample("agent_runtime_tool_calls_total", tool="other", outcome="refused") == (
        before["refused"] + 1
    )
    assert sample("agent_runtime_tool_calls_total", tool="no_such_tool", outcome="refused") == 0
    assert sample("agent_runtime_run_duration_seconds_count", outcome="completed") == (
        before["runs"] + 1
    )
    model_calls = sample(
        "agent_runtime_model_call_duration_seconds_count",
        provider="offline",
        model="offline",
        outcome="ok",
    )
    assert model_calls == before["model"] + 2
    tokens = sample(
        "agent_runtime_model_tokens_total", provider="offline", model="offline", type="input"
    )
    assert tokens > before["input"]
    assert sample("agent_runtime_run_queue_wait_seconds_count") == before["wait"] + 1
    assert sample("agent_runtime_claim_duration_seconds_count", result="claimed") >= (
        before["claims"] + 1
    )

    # one queued run of another session, and the scrape reads the queue
    await api.post_run("waiting in line")
    r = await api.client.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    queue = {s.labels["status"]: s.value for s in families["agent_runtime_queue_runs"].samples}
    assert queue == {"queued": 1.0, "running": 0.0, "awaiting_approval": 0.0, "waiting": 0.0}
    assert families["agent_runtime_queue_oldest_queued_seconds"].samples[0].value >= 0
    assert families["agent_runtime_approvals_pending"].samples[0].value == 0
    tool_calls = {
        (s.labels["tool"], s.labels["outcome"]): s.value
        for s in families["agent_runtime_tool_calls"].samples
        if s.name == "agent_runtime_tool_calls_total"
    }
    assert tool_calls[("list_files", "ok")] == before["ok"] + 1
    for family in families.values():  # bounded labels: no tenant, user, run or session ids
        for s in family.samples:
            assert not {"tenant", "tenant_id", "user", "run_id", "session"} & set(s.labels)


# ------------------------------------------------------------------ who may scrape


def client_of(api: Api, *, base_url: str = "http://test", client_ip: str = "127.0.0.1") -> Any:
    transport = httpx.ASGITransport(app=api.app, client=(client_ip, 40000))
    return httpx.AsyncClient(transport=transport, base_url=base_url)


async def test_without_settings_only_direct_loopback_clients_may_scrape(api: Api) -> None:
    async with client_of(api) as local, client_of(api, client_ip="203.0.113.9") as remote:
        assert (await local.get("/metrics")).status_code == 200
        far = await remote.get("/metrics")
        assert far.status_code == 404 and error_of(far)["code"] == "not_found"
        proxied = await local.get("/metrics", headers={"X-Forwarded-For": "203.0.113.9"})
        assert proxied.status_code == 404
        proxied = await local.get("/metrics", headers={"Forwarded": "for=203.0.113.9"})
        assert proxied.status_code == 404


async def test_metrics_token_is_required_when_set(
    spans: InMemorySpanExporter, database: Database, db_url: str
) -> None:
    settings = make_settings(db_url, metrics_token="scrape-secret-123")
    async with (
        running_api(settings, database) as api,
        client_of(api, client_ip="203.0.113.9") as remote,
    ):
        missing = await remote.get("/metrics")
        assert missing.status_code == 401 and error_of(missing)["code"] == "unauthorized"
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = await remote.get("/metrics", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        user = await remote.get("/metrics", headers=auth())  # a user's JWT is not the token
        assert user.status_code == 401
        right = await remote.get("/metrics", headers={"Authorization": "Bearer scrape-secret-123"})
        assert right.status_code == 200
        assert "agent_runtime_queue_runs" in right.text


async def test_metrics_port_serves_metrics_only_and_the_api_port_none(
    spans: InMemorySpanExporter, database: Database, db_url: str
) -> None:
    settings = make_settings(db_url, metrics_port=9464)
    async with (
        running_api(settings, database) as api,
        client_of(api, base_url="http://127.0.0.1:9464") as metrics_port,
        client_of(api, base_url="http://127.0.0.1:8000") as api_port,
    ):
        assert (await metrics_port.get("/metrics")).status_code == 200
        assert (await api_port.get("/metrics")).status_code == 404
        other = await metrics_port.get("/api/agent-runtime/sessions", headers=auth())
        assert other.status_code == 404 and error_of(other)["code"] == "not_found"
        assert (await metrics_port.get("/healthz")).status_code == 404
        assert (await api_port.get("/healthz")).status_code == 200


def test_tool_and_model_labels_are_bounded() -> None:
    from app.observability import metrics

    assert metrics.bounded("tool", "made_up", ["list_files"]) == "other"
    assert metrics.bounded("tool", "list_files", ["list_files"]) == "list_files"
    assert metrics.provider_of("openai:gpt-4o-mini") == ("openai", "gpt-4o-mini")
    assert metrics.provider_of("gemini-2.5-flash") == ("gcp.gemini", "gemini-2.5-flash")
    names = [f"model-{i}" for i in range(metrics.MAX_LABEL_VALUES + 10)]
    labels = {metrics.bounded("test-kind", n) for n in names}
    assert len(labels) == metrics.MAX_LABEL_VALUES + 1 and "other" in labels


def test_trace_context_is_none_without_a_recording_span() -> None:
    from app.observability.tracing import current_trace_context

    assert current_trace_context() is None
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("outer"):
        carried = current_trace_context()
    if tracing_enabled():
        assert carried is not None and set(carried) <= {"traceparent", "tracestate"}
        json.dumps(carried)
