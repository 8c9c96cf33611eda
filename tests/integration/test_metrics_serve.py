"""`/metrics` under `agent-runtime serve`: the API shows what its worker processes counted, on
its separate METRICS_PORT listener, behind METRICS_TOKEN.

The API and two workers are separate processes sharing PROMETHEUS_MULTIPROC_DIR (set by `serve`
to `AGENT_RUNTIME_DATA_DIR/metrics`, emptied at start); the run below is claimed and executed by
a worker, so every run, model and tool metric read from the API's `/metrics` crossed processes.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_serve import free_port, serving

TOKEN = "scrape-token-for-the-test"


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert r.status_code == 200, r.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


@pytest.mark.e2e
def test_api_metrics_include_the_workers_counts(db_url: str, tmp_path: Path) -> None:
    stale = tmp_path / "data" / "metrics"
    stale.mkdir(parents=True)
    (stale / "counter_1.db").write_bytes(b"left over by an earlier serve, not a valid file")
    port = free_port()
    metrics_url = f"http://127.0.0.1:{port}"
    with serving(db_url, tmp_path, METRICS_TOKEN=TOKEN, METRICS_PORT=str(port)) as serve:
        # the API's port has no /metrics; the metrics port has nothing else and wants the token
        assert httpx.get(f"{serve.url}/metrics", timeout=10).status_code == 404
        assert httpx.get(f"{metrics_url}/metrics", timeout=10).status_code == 401
        assert httpx.get(f"{metrics_url}/healthz", timeout=10).status_code == 404
        token = serve.token()
        r = httpx.post(
            f"{serve.url}/api/agent-runtime",
            json={"message": "/tool list_files"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert r.status_code == 202, r.text
        deadline = time.monotonic() + 30
        while True:
            samples = scrape(metrics_url)
            done = samples.get(
                ("agent_runtime_run_duration_seconds_count", (("outcome", "completed"),)), 0
            )
            if done >= 1:
                break
            assert time.monotonic() < deadline, serve.stderr_tail()
            time.sleep(0.2)
        tool = ("agent_runtime_tool_calls_total", (("outcome", "ok"), ("tool", "list_files")))
        assert samples[tool] == 1
        model = (
            "agent_runtime_model_call_duration_seconds_count",
            (("model", "offline"), ("outcome", "ok"), ("provider", "offline")),
        )
        assert samples[model] == 2
        assert samples[("agent_runtime_run_queue_wait_seconds_count", ())] == 1
        # both workers poll the queue: claims from more than one process add up
        assert samples[("agent_runtime_claim_duration_seconds_count", (("result", "empty"),))] >= 2
        assert samples[("agent_runtime_queue_runs", (("status", "queued"),))] == 0
        assert samples[("agent_runtime_runs_executing", ())] == 0
        assert not (stale / "counter_1.db").exists()
