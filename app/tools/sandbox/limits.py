"""Resource limits of one sandboxed call, and the `prlimit` command line that applies them.

Limits are applied by exec'ing util-linux `prlimit` inside the sandbox, right before the program:
no `preexec_fn` (unsafe in a process with threads, which the worker has), and the limits bind the
program and everything it starts but not the sandbox's own init. `RLIMIT_NPROC` counts the
processes of a real uid, and the kernel does not enforce it for uid 0 at all, which is why the
sandbox always runs as an unprivileged uid (see `isolation.py`). Since Linux 5.14 it is counted
per user namespace, so concurrent bubblewrap sandboxes of one uid do not share the budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.config import Settings

MB = 1024 * 1024
CPU_GRACE_SECONDS = 1
"""CPU seconds allowed beyond the wall-clock limit (the wall clock normally fires first)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one call may use: wall-clock time, CPU, memory, processes, file size, open files."""

    timeout_seconds: int
    memory_bytes: int
    max_processes: int
    max_file_bytes: int
    max_open_files: int
    tmp_bytes: int
    output_max_chars: int

    @classmethod
    def from_settings(cls, settings: Settings, timeout_seconds: int | None = None) -> Limits:
        """The configured limits, with `timeout_seconds` (default from settings) capped at max."""
        wanted = settings.sandbox_timeout_seconds if timeout_seconds is None else timeout_seconds
        return cls(
            timeout_seconds=max(1, min(wanted, settings.sandbox_max_timeout_seconds)),
            memory_bytes=settings.sandbox_memory_mb * MB,
            max_processes=settings.sandbox_max_processes,
            max_file_bytes=settings.sandbox_max_file_mb * MB,
            max_open_files=settings.sandbox_max_open_files,
            tmp_bytes=settings.sandbox_tmp_mb * MB,
            output_max_chars=settings.sandbox_output_max_chars,
        )

    @property
    def cpu_seconds(self) -> int:
        """`RLIMIT_CPU` of each process: the wall-clock limit plus a little grace."""
        return self.timeout_seconds + CPU_GRACE_SECONDS

    def prlimit_argv(self, prlimit: str) -> list[str]:
        """`prlimit … --`: sets soft = hard limits, then execs the rest of the command line."""
        return [
            prlimit,
            f"--cpu={self.cpu_seconds}",
            f"--as={self.memory_bytes}",
            f"--nproc={self.max_processes}",
            f"--fsize={self.max_file_bytes}",
            f"--nofile={self.max_open_files}",
            "--core=0",
            "--",
        ]

    def describe(self) -> dict[str, int]:
        """The limits as JSON (for results and `describe_isolation`)."""
        return {
            "timeoutSeconds": self.timeout_seconds,
            "cpuSeconds": self.cpu_seconds,
            "memoryMb": self.memory_bytes // MB,
            "maxProcesses": self.max_processes,
            "maxFileMb": self.max_file_bytes // MB,
            "maxOpenFiles": self.max_open_files,
            "tmpMb": self.tmp_bytes // MB,
            "outputMaxChars": self.output_max_chars,
        }
