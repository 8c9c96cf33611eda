"""Sandboxed code execution: the `run_python` and `run_shell` tools and their isolation.

Modules: `isolation` (the bubblewrap / fallback command line), `detect` (what works on this
machine), `layout` (the per-call directories), `limits` (rlimits via `prlimit`), `runner` (one
process: timeout, whole-tree kill, capped output), `sync` (workspace copy out, changes back),
`tools` (the tools).
"""

from app.tools.sandbox.detect import describe_isolation, detect_isolation
from app.tools.sandbox.tools import RunPython, RunShell, sandbox_tools

__all__ = ["RunPython", "RunShell", "describe_isolation", "detect_isolation", "sandbox_tools"]
