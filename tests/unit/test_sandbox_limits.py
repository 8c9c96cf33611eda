"""Sandbox limits: timeouts default and are capped by settings; `prlimit` sets each limit."""

from __future__ import annotations

import pytest

from app.config import Settings
from app.tools.sandbox.limits import MB, Limits

# Never beside another test (`make test` runs these after the parallel part): they count the
# sandbox user's processes, which another test's sandbox would add to.
pytestmark = pytest.mark.serial


def test_timeout_defaults_and_is_capped() -> None:
    settings = Settings(sandbox_timeout_seconds=7, sandbox_max_timeout_seconds=20)
    assert Limits.from_settings(settings).timeout_seconds == 7
    assert Limits.from_settings(settings, 3).timeout_seconds == 3
    assert Limits.from_settings(settings, 999).timeout_seconds == 20
    assert Limits.from_settings(settings, 0).timeout_seconds == 1


def test_prlimit_sets_every_limit() -> None:
    settings = Settings(
        sandbox_memory_mb=128,
        sandbox_max_processes=10,
        sandbox_max_file_mb=2,
        sandbox_max_open_files=32,
    )
    limits = Limits.from_settings(settings, 5)
    assert limits.prlimit_argv("/usr/bin/prlimit") == [
        "/usr/bin/prlimit",
        "--cpu=6",
        f"--as={128 * MB}",
        "--nproc=10",
        f"--fsize={2 * MB}",
        "--nofile=32",
        "--core=0",
        "--",
    ]
    assert limits.describe()["memoryMb"] == 128
