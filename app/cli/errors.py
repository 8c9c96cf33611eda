"""The CLI's exit codes and `CliError`, the user-facing error every command may raise."""

from __future__ import annotations

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A user-facing error: printed as `error: …`, exit code 2."""
