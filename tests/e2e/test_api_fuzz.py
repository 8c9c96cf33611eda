"""Property-based API testing: schemathesis drives the app's own OpenAPI document against the real
API and worker processes, and fails on any server error or any response that does not match what
the document promises (status code, content type, headers, body schema).

Every phase runs: the documented examples, coverage of each schema's boundaries, random fuzzing
(valid and invalid inputs) and the stateful phase, which chains operations through the ids their
responses return (create an agent, then patch, read and delete it; post a run, then stream it).
The seed is fixed so that CI is reproducible; set `SCHEMATHESIS_SEED` (and `SCHEMATHESIS_EXAMPLES`)
to explore further locally. Whatever it finds is fixed and kept as a regular test
(`tests/integration/test_fuzz_findings.py`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import Stack

pytestmark = pytest.mark.e2e

CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
    ]
)


def _schemathesis() -> str:
    found = Path(sys.executable).with_name("schemathesis")
    if found.exists():
        return str(found)
    on_path = shutil.which("schemathesis")
    assert on_path, "schemathesis is a dev dependency (pip install -e '.[dev]')"
    return on_path


@pytest.mark.timeout(420)
def test_the_openapi_document_holds_under_fuzzing(stack: Stack, tmp_path: Path) -> None:
    seed = os.environ.get("SCHEMATHESIS_SEED", "20261123")
    examples = os.environ.get("SCHEMATHESIS_EXAMPLES", "30")
    command = [
        _schemathesis(),
        "run",
        f"{stack.base_url}/openapi.json",
        "--header",
        f"Authorization: Bearer {stack.token('fuzzer', 'fuzzing', role='owner')}",
        "--checks",
        CHECKS,
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        examples,
        "--seed",
        seed,
        "--workers",  # one: CPython 3.11's ast.parse, which hypothesis calls, is not thread-safe
        "1",
        "--request-timeout",
        "30",
        "--report-dir",
        str(tmp_path / "report"),
    ]
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=400, check=False
    )
    report = done.stdout[-20000:] + done.stderr[-5000:]
    assert done.returncode == 0, f"schemathesis found failures (seed {seed}):\n{report}"
    assert "passed" in done.stdout and "generated" in done.stdout, report
    api_log = (stack.log_dir / "api.log").read_text(errors="replace")
    assert "unhandled error" not in api_log, api_log[-5000:]
