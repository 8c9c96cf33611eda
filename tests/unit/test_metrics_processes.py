"""Metrics across processes: what one process records, another renders (a shared
PROMETHEUS_MULTIPROC_DIR, as under `serve`); a dead process's live gauges drop out once it is
marked dead; a worker run on its own serves its metrics on METRICS_PORT.

Each side is a real Python process: prometheus_client picks its multiprocess mode at import,
from the environment, so it cannot be switched inside the test process.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from app.observability.metrics import process_exit, reset_multiprocess_dir

ROOT = Path(__file__).resolve().parents[2]

WORKER_LIKE = """
from app.observability import metrics
metrics.observe_tool_call("read_file", "ok", 0.2)
metrics.observe_tool_call("read_file", "ok", 0.3)
metrics.observe_run_finished("completed", 1.5)
metrics.SSE_CONNECTIONS.inc()  # left open: the process "dies" without closing it
"""

RENDER = """
from app.observability.metrics import render
print(render()[0].decode())
"""


def python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_one_process_renders_what_others_recorded(tmp_path: Path) -> None:
    shared = tmp_path / "metrics"
    reset_multiprocess_dir(str(shared))
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(shared)}
    python(WORKER_LIKE, env)
    python(WORKER_LIKE, env)

    seen = values(python(RENDER, env).stdout)
    tool = ("agent_runtime_tool_calls_total", (("outcome", "ok"), ("tool", "read_file")))
    assert seen[tool] == 4  # two processes, two calls each
    runs = ("agent_runtime_run_duration_seconds_count", (("outcome", "completed"),))
    assert seen[runs] == 2
    assert seen[("agent_runtime_sse_connections", ())] == 2

    # serve marks its children dead when they exit: their open streams are no longer counted
    for name in os.listdir(shared):
        if name.startswith("gauge_livesum_"):
            process_exit(int(name.rsplit("_", 1)[1].split(".")[0]), str(shared))
    seen = values(python(RENDER, env).stdout)
    assert seen[("agent_runtime_sse_connections", ())] == 0
    assert seen[tool] == 4  # counters survive their process

    reset_multiprocess_dir(str(shared))  # serve's start: an earlier serve's counts are gone
    assert tool not in values(python(RENDER, env).stdout)


def test_a_worker_on_its_own_serves_its_metrics_on_the_metrics_port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = f"""
import urllib.request
from app.observability import metrics
metrics.start_worker_listener("127.0.0.1", {port})
metrics.observe_tool_call("list_files", "error", 0.1)
print(urllib.request.urlopen("http://127.0.0.1:{port}/metrics", timeout=5).read().decode())
"""
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    seen = values(python(code, env).stdout)
    assert (
        seen[("agent_runtime_tool_calls_total", (("outcome", "error"), ("tool", "list_files")))]
        == 1
    )
