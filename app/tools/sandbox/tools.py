"""The code-execution tools `run_python` and `run_shell` (group `runtime`, risk `high`).

Each call: copy the session workspace into a fresh directory, run the program there in a fresh
sandbox (`isolation.py`) under the configured limits (`limits.py`, `runner.py`), then store the
regular files it created, changed or deleted back in the workspace (`sync.py`) — also after a
timeout, so partial results survive — and remove the directory. Not idempotent: a call whose
worker died is not re-run.
"""

from __future__ import annotations

import asyncio
import os
from abc import abstractmethod
from typing import Any

import structlog

from app.tools.base import Tool, ToolContext, ToolError
from app.tools.sandbox.detect import isolation_for
from app.tools.sandbox.isolation import Isolation, system_python
from app.tools.sandbox.layout import Layout, create_layout, remove_layout, write_input
from app.tools.sandbox.limits import Limits
from app.tools.sandbox.runner import run_process
from app.tools.sandbox.sync import apply_changes, collect_changes, materialize
from app.tools.workspace import Workspace

log = structlog.get_logger(__name__)

MAX_SOURCE_CHARS = 200_000
_TIMEOUT = {
    "type": "integer",
    "minimum": 1,
    "description": "Wall-clock limit in seconds (default and maximum are set by the server).",
}
_COMMON = (
    "It runs in a fresh sandbox with no network, as an unprivileged user, under CPU, memory, "
    "process and file-size limits. The working directory `/workspace` holds a copy of the "
    "session's files; regular files created, changed or deleted there are saved back to the "
    "workspace afterwards (even after a timeout; symlinks and special files are not). Returns "
    "exitCode, stdout, stderr (long output is cut in the middle, marked `…[truncated N chars]…`), "
    "timedOut, durationSeconds and the files written, deleted and skipped."
)


class _SandboxTool(Tool):
    """Runs one program file in the sandbox; subclasses say which file and interpreter."""

    group = "runtime"
    risk = "high"
    idempotent = False
    filename: str

    @abstractmethod
    def source(self, args: dict[str, Any]) -> str:
        """The program text taken from the arguments."""

    @abstractmethod
    def argv(self, program: str) -> list[str]:
        """The command that runs the program file (as seen inside the sandbox)."""

    def env(self, isolation: Isolation, layout: Layout) -> dict[str, str]:
        """Extra environment variables of the program."""
        return {}

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """Run the program; the result is described in the tool description."""
        isolation = await asyncio.to_thread(isolation_for, ctx.settings)
        if not isolation.available:
            raise ToolError(f"code execution is disabled: {isolation.reason}")
        limits = Limits.from_settings(ctx.settings, args.get("timeout_seconds"))
        workspace = Workspace.for_tool(ctx)
        files = await workspace.read_all()
        layout = await asyncio.to_thread(create_layout, isolation.owner_uid, isolation.inner_uid)
        try:
            before = await asyncio.to_thread(
                materialize, files, layout.workspace, isolation.owner_uid
            )
            write_input(layout, self.filename, self.source(args))
            argv = self.argv(isolation.program_path(layout, self.filename))
            network, env = ctx.settings.sandbox_network, self.env(isolation, layout)
            ran = await run_process(
                lambda info_fd: isolation.invocation(
                    layout, argv, limits, network=network, env=env, info_fd=info_fd
                ),
                timeout_seconds=limits.timeout_seconds,
                max_chars=limits.output_max_chars,
            )
            changes = await asyncio.to_thread(
                collect_changes,
                layout.workspace,
                before,
                max_file_bytes=workspace.max_file_bytes,
                max_total_bytes=workspace.max_total_bytes,
            )
        finally:
            remove_layout(layout)  # synchronous: must happen even while being cancelled
        saved = await apply_changes(workspace, changes)
        log.info(
            "sandboxed code ran",
            tool=self.name,
            run_id=str(ctx.run_id),
            exit_code=ran.exit_code,
            timed_out=ran.timed_out,
            seconds=round(ran.duration_seconds, 3),
        )
        return {
            "exitCode": ran.exit_code,
            "timedOut": ran.timed_out,
            "durationSeconds": round(ran.duration_seconds, 3),
            "timeoutSeconds": limits.timeout_seconds,
            "stdout": ran.stdout.text(),
            "stderr": ran.stderr.text(),
            "stdoutTruncated": ran.stdout.truncated,
            "stderrTruncated": ran.stderr.truncated,
            "files": saved,
            "sandbox": isolation.kind,
        }


class RunPython(_SandboxTool):
    """Run a Python program in the sandbox."""

    name = "run_python"
    description = (
        "Run a Python 3 program (the system interpreter, standard library only; modules in the "
        "workspace are importable). " + _COMMON
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "code": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_SOURCE_CHARS,
                "description": "The program (a whole Python file).",
            },
            "timeout_seconds": _TIMEOUT,
        },
        "required": ["code"],
        "additionalProperties": False,
    }
    filename = "main.py"

    def source(self, args: dict[str, Any]) -> str:
        """The `code` argument."""
        code: str = args["code"]
        return code

    def argv(self, program: str) -> list[str]:
        """`/usr/bin/python3 <file>` (or `/usr/local/bin/python3` where that is the only one)."""
        python = system_python()
        if python is None:
            raise ToolError("run_python is unavailable: no python3 is installed under /usr")
        return [python, program]

    def env(self, isolation: Isolation, layout: Layout) -> dict[str, str]:
        """`PYTHONPATH` = the workspace, so its modules import."""
        return {"PYTHONPATH": isolation.workdir(layout)}


class RunShell(_SandboxTool):
    """Run a shell command line in the sandbox."""

    name = "run_shell"
    description = (
        "Run a bash command line (coreutils and the other programs installed on the server; "
        "pipes, redirections and `&&` work). " + _COMMON
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_SOURCE_CHARS,
                "description": "The command line (a bash script).",
            },
            "timeout_seconds": _TIMEOUT,
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    filename = "main.sh"

    def source(self, args: dict[str, Any]) -> str:
        """The `command` argument."""
        command: str = args["command"]
        return command

    def argv(self, program: str) -> list[str]:
        """`/bin/bash <file>` (or `/bin/sh` where bash is missing)."""
        shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
        return [shell, program]


def sandbox_tools() -> list[Tool]:
    """One instance of each code-execution tool."""
    return [RunPython(), RunShell()]
