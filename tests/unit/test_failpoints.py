"""Failpoints kill the process only where armed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from app.core.failpoints import ENV, INJECT_AFTER_COMMIT

SCRIPT = (
    "from app.core.failpoints import failpoint\n"
    "failpoint('other')\n"
    "print('alive', flush=True)\n"
    f"failpoint({INJECT_AFTER_COMMIT!r})\n"
    "print('still alive', flush=True)\n"
)


def _run(armed: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if armed is not None:
        env[ENV] = armed
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=30
    )


def test_an_armed_failpoint_kills_the_process_with_sigkill() -> None:
    done = _run(f"x,{INJECT_AFTER_COMMIT}")
    assert done.returncode == -signal.SIGKILL
    assert done.stdout == "alive\n"


def test_unarmed_failpoints_do_nothing() -> None:
    assert _run(None).stdout == "alive\nstill alive\n"
    assert _run("inject").stdout == "alive\nstill alive\n"  # names match whole, not by prefix
