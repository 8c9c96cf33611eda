"""Prometheus metrics: the instruments, what records into them, and the `/metrics` text.

Every process (API, workers) records into the same instruments. Under `agent-runtime serve` the
processes share PROMETHEUS_MULTIPROC_DIR (`serve` sets it and empties it at start), so the API's
`/metrics` shows what the workers counted; a process that exits is marked dead
(`mark_process_dead`), which drops its live gauges. Without that directory each process counts
for itself (a worker deployed alone serves its own on METRICS_PORT: `start_worker_listener`).

Gauges that describe the database (queue depth by status, pending approvals) are not recorded
here: they are read at scrape time by the API (`app/queue/stats.py`) and handed to `render` as
`DatabaseGauges`.

Label values are bounded: no tenant, user, run or session ids; tool and model names pass
through `bounded`, which maps names outside the known set (and past a per-label cap) to `other`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import SupportsFloat

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    multiprocess,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
OTHER = "other"
MAX_LABEL_VALUES = 64
"""Distinct values one process gives a free-form label (model names) before using `other`."""

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_RUN_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
_CALL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)

CLAIM_SECONDS = Histogram(
    "agent_runtime_claim_duration_seconds",
    "Time of one claim attempt on the run queue (result: claimed or empty).",
    ["result"],
    buckets=_LATENCY_BUCKETS,
)
QUEUE_WAIT_SECONDS = Histogram(
    "agent_runtime_run_queue_wait_seconds",
    "From a run's enqueue (or the end of its debounce window) to its first start by a worker.",
    buckets=_WAIT_BUCKETS,
)
RUN_SECONDS = Histogram(
    "agent_runtime_run_duration_seconds",
    "From a run's first start to its end (completed, failed, cancelled), parked time included.",
    ["outcome"],
    buckets=_RUN_BUCKETS,
)
RUNS_ACTIVE = Gauge(
    "agent_runtime_runs_executing",
    "Runs the workers are executing now (claimed, not parked).",
    multiprocess_mode="livesum",
)
MODEL_CALL_SECONDS = Histogram(
    "agent_runtime_model_call_duration_seconds",
    "One streamed model call, first byte to last (outcome: ok or error).",
    ["provider", "model", "outcome"],
    buckets=_CALL_BUCKETS,
)
MODEL_TOKENS = Counter(
    "agent_runtime_model_tokens",
    "Model tokens reported by providers (type: input or output).",
    ["provider", "model", "type"],
)
TOOL_CALLS = Counter(
    "agent_runtime_tool_calls",
    "Tool calls by tool and outcome (ok, error, refused, interrupted).",
    ["tool", "outcome"],
)
TOOL_CALL_SECONDS = Histogram(
    "agent_runtime_tool_call_duration_seconds",
    "Execution time of tool calls that ran (refused calls are not timed).",
    ["tool"],
    buckets=_CALL_BUCKETS,
)
MODEL_FALLBACKS = Counter(
    "agent_runtime_model_fallbacks",
    "Runs moved to the next of their agent's fallback models (reason: the failure's code).",
    ["from_provider", "from_model", "to_provider", "to_model", "reason"],
)
COMPACTIONS = Counter(
    "agent_runtime_compactions",
    "Context compactions (trigger: auto when the context would not fit, forced when the "
    "provider rejected it as too long).",
    ["trigger"],
)
LEASE_RECOVERIES = Counter(
    "agent_runtime_lease_recoveries",
    "Runs whose worker stopped renewing their lease (outcome: requeued, or failed "
    "worker_crashed at MAX_RUN_ATTEMPTS).",
    ["outcome"],
)
SSE_CONNECTIONS = Gauge(
    "agent_runtime_sse_connections",
    "Open event streams (SSE) served by the API.",
    multiprocess_mode="livesum",
)


# --------------------------------------------------------------------------- labels


@dataclass
class _Bound:
    seen: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


_bounds: dict[str, _Bound] = {}


def bounded(kind: str, value: str, known: Iterable[str] | None = None) -> str:
    """`value` as a label value of `kind`, or `other`: when `known` is given and lacks it, or
    when this process has already used `MAX_LABEL_VALUES` other values for `kind`."""
    if not value or (known is not None and value not in known):
        return OTHER
    bound = _bounds.setdefault(kind, _Bound())
    with bound.lock:
        if value in bound.seen:
            return value
        if len(bound.seen) >= MAX_LABEL_VALUES:
            return OTHER
        bound.seen.add(value)
    return value


def provider_of(model_name: str) -> tuple[str, str]:
    """(provider, model) labels of a resolved model name, provider names as in the OpenTelemetry
    GenAI conventions (`gcp.gemini`, `openai`); the model name is bounded."""
    if model_name.startswith("gemini"):
        provider, model = "gcp.gemini", model_name
    elif ":" in model_name:
        prefix, model = model_name.split(":", 1)
        provider = prefix if prefix == "openai" else bounded("provider", prefix)
    elif model_name == "offline":
        provider, model = "offline", model_name
    else:
        provider, model = OTHER, model_name
    return provider, bounded("model", model)


# --------------------------------------------------------------------------- recording


def observe_claim(seconds: float, *, claimed: bool) -> None:
    """One claim attempt took `seconds`."""
    CLAIM_SECONDS.labels("claimed" if claimed else "empty").observe(seconds)


def observe_queue_wait(seconds: float) -> None:
    """A run started for the first time `seconds` after it became claimable."""
    QUEUE_WAIT_SECONDS.observe(max(0.0, seconds))


def observe_run_finished(outcome: str, seconds: SupportsFloat | None) -> None:
    """A run ended with `outcome` (completed, failed, cancelled), `seconds` after its start
    (None: it never started)."""
    if seconds is not None:
        RUN_SECONDS.labels(outcome).observe(max(0.0, float(seconds)))


def observe_model_call(
    model_name: str,
    seconds: float,
    *,
    ok: bool,
    input_tokens: int = 0,
    output_tokens: int = 0,
) -> None:
    """One model call of `model_name` (as resolved) and the tokens it reported."""
    provider, model = provider_of(model_name)
    MODEL_CALL_SECONDS.labels(provider, model, "ok" if ok else "error").observe(seconds)
    if input_tokens:
        MODEL_TOKENS.labels(provider, model, "input").inc(input_tokens)
    if output_tokens:
        MODEL_TOKENS.labels(provider, model, "output").inc(output_tokens)


def observe_tool_call(tool: str, outcome: str, seconds: float | None = None) -> None:
    """A tool call ended with `outcome`; `tool` must already be bounded (`bounded`)."""
    TOOL_CALLS.labels(tool, outcome).inc()
    if seconds is not None:
        TOOL_CALL_SECONDS.labels(tool).observe(seconds)


def count_compaction(*, forced: bool) -> None:
    """A compaction was stored."""
    COMPACTIONS.labels("forced" if forced else "auto").inc()


def count_lease_recoveries(requeued: int = 0, failed: int = 0) -> None:
    """Runs with expired leases were put back in their lanes or given up on."""
    if requeued:
        LEASE_RECOVERIES.labels("requeued").inc(requeued)
    if failed:
        LEASE_RECOVERIES.labels("failed").inc(failed)


# --------------------------------------------------------------------------- exposition


@dataclass(frozen=True, slots=True)
class DatabaseGauges:
    """What the database says at scrape time (`app/queue/stats.py` reads it)."""

    runs_by_status: dict[str, int]
    oldest_queued_seconds: float
    approvals_pending: int
    oldest_approval_seconds: float


class _DatabaseCollector(Collector):
    def __init__(self, gauges: DatabaseGauges) -> None:
        self.gauges = gauges

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = self.gauges
        runs = GaugeMetricFamily(
            "agent_runtime_queue_runs",
            "Runs in the queue table by status (read at scrape time).",
            labels=["status"],
        )
        for status, count in sorted(g.runs_by_status.items()):
            runs.add_metric([status], count)
        yield runs
        yield GaugeMetricFamily(
            "agent_runtime_queue_oldest_queued_seconds",
            "Age of the oldest claimable queued run (0 when none).",
            value=g.oldest_queued_seconds,
        )
        yield GaugeMetricFamily(
            "agent_runtime_approvals_pending",
            "Tool approvals waiting for a decision.",
            value=g.approvals_pending,
        )
        yield GaugeMetricFamily(
            "agent_runtime_approvals_pending_oldest_seconds",
            "Age of the oldest pending tool approval (0 when none).",
            value=g.oldest_approval_seconds,
        )


def multiprocess_dir() -> str | None:
    """The shared metrics directory of this process group, if any."""
    return os.environ.get(MULTIPROC_ENV) or None


class _Combined(Collector):
    """Several sources as one collector, so one registry (one encoder) renders them all."""

    def __init__(self, *sources: Collector) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        for source in self.sources:
            yield from source.collect()


def render(database: DatabaseGauges | None = None, accept: str = "") -> tuple[bytes, str]:
    """The Prometheus text (or OpenMetrics, as `accept` asks) of every process's instruments
    plus the database gauges, and its content type."""
    sources: list[Collector] = []
    if (directory := multiprocess_dir()) is not None:
        sources.append(multiprocess.MultiProcessCollector(None, directory))  # type: ignore[no-untyped-call]
    else:
        sources.append(REGISTRY)
    if database is not None:
        sources.append(_DatabaseCollector(database))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Combined(*sources))
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type


def process_exit(pid: int | None = None, directory: str | None = None) -> None:
    """Tell the shared directory (this process's, or `directory`) that process `pid` (this one
    by default) is gone: its live gauges drop out."""
    directory = directory or multiprocess_dir()
    if directory is not None:
        multiprocess.mark_process_dead(pid if pid is not None else os.getpid(), directory)  # type: ignore[no-untyped-call]


def reset_multiprocess_dir(directory: str) -> None:
    """Create `directory`, or empty it of an earlier run's metric files (at `serve` start)."""
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        if name.endswith(".db"):
            os.remove(os.path.join(directory, name))


def start_worker_listener(host: str, port: int) -> None:
    """Serve this process's metrics on `host:port` (a worker deployed on its own; under
    `serve` the API serves everyone's and workers do not listen)."""
    if multiprocess_dir() is None:
        start_http_server(port, addr=host)


def count_model_fallback(from_model: str, to_model: str, reason: str) -> None:
    """A run moved from `from_model` to `to_model` (resolved names) after a `reason` failure."""
    from_provider, from_name = provider_of(from_model)
    to_provider, to_name = provider_of(to_model)
    MODEL_FALLBACKS.labels(from_provider, from_name, to_provider, to_name, reason).inc()
