"""`agent-runtime`: the command line (serve, api, worker, migrate, token, run).

Settings come from the environment and `.env` (see `.env.example`); flags override a few. Every
command that needs a database resolves it the same way (`app.serve.resolve_database`):
DATABASE_URL if set, else the embedded Postgres in AGENT_RUNTIME_DATA_DIR.

One module per concern: `parser` (arguments, value types, `main`), `server_commands` (serve, api,
worker, migrate), `token_command` (token), `run_command` (run), `sse` (the SSE line parser),
`render` (run events on the terminal), `errors` (exit codes, `CliError`).
"""

from app.cli.errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED, CliError
from app.cli.parser import _apply_overrides, build_parser, main
from app.cli.render import Renderer
from app.cli.run_command import API_PREFIX, cmd_run, follow_run
from app.cli.server_commands import cmd_api, cmd_migrate, cmd_serve, cmd_worker
from app.cli.sse import SSEEvent, SSEParser
from app.cli.token_command import cmd_token

__all__ = [
    "API_PREFIX",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_RUN_FAILED",
    "CliError",
    "Renderer",
    "SSEEvent",
    "SSEParser",
    "_apply_overrides",
    "build_parser",
    "cmd_api",
    "cmd_migrate",
    "cmd_run",
    "cmd_serve",
    "cmd_token",
    "cmd_worker",
    "follow_run",
    "main",
]
