"""Traces leave the process over OTLP/HTTP only when an endpoint is configured.

Each case is a fresh Python process (the global tracer provider can be set once per process); the
collector is a local HTTP server that records what it is sent.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

EMIT = """
from app.config import Settings
from app.observability import tracing
configured = tracing.configure_tracing(Settings(), "agent-runtime-test")
with tracing.model_span("offline", "offline") as span:
    tracing.set_usage(span, 12, 3)
tracing.shutdown_tracing()
print(configured, tracing.tracing_enabled())
"""


class Collector(ThreadingHTTPServer):
    received: list[tuple[str, str, bytes]]


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802  (http.server's naming)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        assert isinstance(self.server, Collector)
        self.server.received.append((self.path, self.headers.get("Content-Type", ""), body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector(("127.0.0.1", 0), _Handler)
    server.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def emit(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", EMIT],
        env={**clean, "AGENT_RUNTIME_ENV_FILE": "", **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_spans_are_exported_to_the_configured_endpoint(collector: Collector) -> None:
    url = f"http://127.0.0.1:{collector.server_address[1]}"
    assert emit(OTEL_EXPORTER_OTLP_ENDPOINT=url) == "True True"
    [(path, content_type, body)] = collector.received
    assert path == "/v1/traces" and content_type == "application/x-protobuf"
    assert b"chat offline" in body and b"gen_ai.usage.input_tokens" in body
    assert b"agent-runtime-test" in body  # service.name


def test_an_endpoint_set_in_the_env_file_works_too(collector: Collector, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{collector.server_address[1]}/"
    env_file = tmp_path / "settings.env"
    env_file.write_text(f"OTEL_EXPORTER_OTLP_ENDPOINT={url}\nOTEL_SERVICE_NAME=from-env-file\n")
    assert emit(AGENT_RUNTIME_ENV_FILE=str(env_file)) == "True True"
    [(path, _, body)] = collector.received
    assert path == "/v1/traces" and b"from-env-file" in body


def test_without_an_endpoint_nothing_is_installed_or_sent(collector: Collector) -> None:
    assert emit() == "False False"
    assert collector.received == []
