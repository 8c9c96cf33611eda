"""Failpoints: named places where a crash test can make this process die (SIGKILL) on purpose.

`AGENT_RUNTIME_FAILPOINTS` (comma-separated names) arms them; unset (always, in production) a
failpoint is one dictionary lookup and does nothing. The crash tests of the hand-offs
(tests/e2e/test_handoff_crashes.py) start a worker with one armed, let it die exactly there —
before or after a transaction commits — and check that the next worker loses nothing and does
nothing twice. SIGKILL, not an exception: no `finally`, no rollback by us, no goodbye to the
database; the server notices the dead connection and rolls back whatever was open.
"""

from __future__ import annotations

import os
import signal
from typing import Final

ENV: Final = "AGENT_RUNTIME_FAILPOINTS"

CHILD_FINISH_BEFORE_COMMIT: Final = "finish.before_commit"
"""In the transaction that finishes a run (and so hands a child's outcome over), uncommitted."""
CHILD_FINISH_AFTER_COMMIT: Final = "finish.after_commit"
"""Right after that transaction committed."""
INJECT_BEFORE_COMMIT: Final = "inject.before_commit"
"""In the transaction that injects inbox messages into the transcript, uncommitted."""
INJECT_AFTER_COMMIT: Final = "inject.after_commit"
"""Right after that transaction committed."""
TOOL_AFTER_RUN: Final = "tool.after_run"
"""A tool call has done its work; its result is not stored yet."""


def failpoint(name: str) -> None:
    """Die here (SIGKILL) if `name` is armed in `AGENT_RUNTIME_FAILPOINTS`."""
    armed = os.environ.get(ENV)
    if armed and name in armed.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
