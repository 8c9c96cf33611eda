"""The `agent-runtime` argument parser, its value types, and `main`: settings, logging, dispatch."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING

from app.cli.errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, CliError
from app.cli.run_command import cmd_run
from app.cli.secrets_command import cmd_secrets_reencrypt
from app.cli.server_commands import cmd_api, cmd_migrate, cmd_serve, cmd_worker
from app.cli.token_command import cmd_token

if TYPE_CHECKING:
    from app.config import Settings

    _Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

_DESCRIPTION = """\
Multi-tenant LLM agent runtime: HTTP API, lane-queue workers and the agent loop on Postgres.

Settings are read from the environment and ./.env (see .env.example). With DATABASE_URL unset,
an embedded Postgres keeps its data in AGENT_RUNTIME_DATA_DIR (default .data).
"""
_EPILOG = """\
examples:
  agent-runtime serve                       # everything, on http://127.0.0.1:8000
  agent-runtime run "hello"                 # talk to it from another terminal
  agent-runtime token --user alice --tenant acme
  DATABASE_URL=postgresql://… agent-runtime migrate
"""


def _nonneg_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError("must be 1..65535")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The `agent-runtime` argument parser."""
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="agent-runtime", description=_DESCRIPTION, epilog=_EPILOG, formatter_class=fmt
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_serve(sub)
    _add_api(sub)
    _add_worker(sub)
    _add_migrate(sub)
    _add_token(sub)
    _add_run(sub)
    _add_secrets(sub)
    return parser


def _add_serve(sub: _Subparsers) -> None:
    p = sub.add_parser(
        "serve",
        help="run everything: (embedded) Postgres, migrations, the API and workers",
        description=(
            "Run the whole runtime in the foreground: resolve the database (DATABASE_URL, else "
            "an embedded Postgres in AGENT_RUNTIME_DATA_DIR), apply migrations, make sure a JWT "
            "secret exists (printing a dev token if it was generated), then supervise the API "
            "and WORKERS worker processes. Ctrl-C or SIGTERM stops everything; if a child exits "
            "on its own, everything stops and the exit code is 1 (children are not restarted)."
        ),
    )
    p.add_argument("--host", help="bind address (default: HOST, 127.0.0.1)")
    p.add_argument("--port", type=_port, help="HTTP port (default: PORT, 8000)")
    p.add_argument(
        "--workers", type=_nonneg_int, help="worker processes to start (default: WORKERS, 1)"
    )
    p.set_defaults(handler=cmd_serve)


def _add_api(sub: _Subparsers) -> None:
    p = sub.add_parser(
        "api",
        help="run only the HTTP API (what `serve` starts; one per container)",
        description="Run the HTTP API with uvicorn until SIGINT/SIGTERM.",
    )
    p.add_argument("--host", help="bind address (default: HOST, 127.0.0.1)")
    p.add_argument("--port", type=_port, help="HTTP port (default: PORT, 8000)")
    p.set_defaults(handler=cmd_api)


def _add_worker(sub: _Subparsers) -> None:
    p = sub.add_parser(
        "worker",
        help="run one worker process (claims and executes runs)",
        description=(
            "Run one worker until SIGTERM/SIGINT; on stop it finishes its runs for "
            "SHUTDOWN_GRACE_SECONDS, then hands the rest back to the queue."
        ),
    )
    p.add_argument("--worker-id", help="worker id (default: host:pid:random)")
    p.set_defaults(handler=cmd_worker)


def _add_migrate(sub: _Subparsers) -> None:
    p = sub.add_parser(
        "migrate",
        help="apply database migrations and print the revision",
        description="Apply every pending migration to DATABASE_URL (or the embedded Postgres).",
    )
    p.set_defaults(handler=cmd_migrate)


def _add_secrets(sub: _Subparsers) -> None:
    p = sub.add_parser(
        "secrets",
        help="manage tenant secrets at rest (SECRETS_KEY)",
        description="Tenant secrets (provider keys) are encrypted with SECRETS_KEY's first key.",
    )
    actions = p.add_subparsers(dest="secrets_command", metavar="ACTION", required=True)
    reencrypt = actions.add_parser(
        "reencrypt",
        help="re-encrypt every stored secret under SECRETS_KEY's first key",
        description=(
            "Re-encrypt every tenant's stored provider keys under the first key of SECRETS_KEY "
            "(as the database owner, across tenants). Idempotent; prints the counts. Rotate: put "
            "the new key first, run this, then remove the old key."
        ),
    )
    reencrypt.set_defaults(handler=cmd_secrets_reencrypt)


def _add_token(sub: _Subparsers) -> None:
    p = sub.add_parser(
        "token",
        help="print a JWT for a user (signed with SUPABASE_JWT_SECRET or the local secret)",
        description=(
            "Print an HS256 JWT (aud JWT_AUDIENCE) for --user, signed with SUPABASE_JWT_SECRET "
            "or, if that is unset, the secret generated in AGENT_RUNTIME_DATA_DIR/jwt-secret."
        ),
    )
    p.add_argument("--user", required=True, help="user id (the `sub` claim)")
    p.add_argument(
        "--tenant", help="tenant id (app_metadata.tenant_id; default: the user's own tenant)"
    )
    p.add_argument(
        "--role",
        choices=["owner", "admin", "member"],
        help="role in a shared --tenant (app_metadata.role; default member; a user's own "
        "tenant is always theirs to own)",
    )
    p.add_argument(
        "--ttl", type=_positive_int, default=86400, help="lifetime in seconds (default 86400)"
    )
    p.set_defaults(handler=cmd_token)


def _add_run(sub: _Subparsers) -> None:
    p = sub.add_parser(
        "run",
        help="send a message to a running server and stream the answer",
        description=(
            "POST a message, then stream the run's events: assistant text as it arrives, tool "
            "calls and results, and a final status line. Exit code 0 when the run completed, 1 "
            "when it failed or was cancelled, 2 on usage or connection errors. Ctrl-C cancels "
            "the run (a second Ctrl-C quits at once)."
        ),
    )
    p.add_argument("message", help="the user message (offline model: try `/tool NAME {json}`)")
    p.add_argument("--session", help="session key (default: a new session)")
    p.add_argument("--agent", help="agent id (uuid; default: the tenant's default agent)")
    p.add_argument(
        "--if-busy",
        choices=["enqueue", "reject", "interrupt", "steer", "collect"],
        help="when the session already has a live run: queue after it (enqueue), refuse "
        "(reject), stop it (interrupt), add the message to it (steer) or merge with other "
        "arriving messages (collect); default: the agent's setting (enqueue)",
    )
    p.add_argument("--url", help="server base URL (default: http://HOST:PORT)")
    p.add_argument("--token", help="bearer token (default: minted from the local secret)")
    p.add_argument("--user", default="dev", help="user to mint a token for (default: dev)")
    p.add_argument("--tenant", help="tenant to mint a token for (default: the user's own)")
    p.set_defaults(handler=cmd_run)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `agent-runtime` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in _SERVICES:  # first, before the slow imports
        signal.signal(signal.SIGTERM, _stop_while_starting)
    import pydantic

    from app.config import Settings
    from app.serve import MigrationError

    try:
        settings = Settings()
    except pydantic.ValidationError as e:
        print(f"error: invalid settings (environment or .env):\n{e}", file=sys.stderr)
        return EXIT_ERROR
    settings = _apply_overrides(settings, args)
    from app.logging import configure_logging

    try:
        configure_logging(settings, process=args.command)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    try:
        code: int = args.handler(args, settings)
    except (CliError, MigrationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return code


_SERVICES = frozenset({"serve", "api", "worker"})


def _stop_while_starting(signum: int, frame: FrameType | None) -> None:
    """SIGTERM before a service installed its own handler: unwind (stopping what was started).

    Services replace this handler once they run (uvicorn, `run_worker`, `serve`'s supervisor);
    until then nothing has been claimed or served, so stopping is clean (exit 0), and `finally`
    blocks still stop an embedded Postgres this process started.
    """
    raise SystemExit(EXIT_OK)


def _apply_overrides(settings: Settings, args: argparse.Namespace) -> Settings:
    update = {
        key: getattr(args, key)
        for key in ("host", "port", "workers")
        if getattr(args, key, None) is not None
    }
    return settings.model_copy(update=update) if update else settings
