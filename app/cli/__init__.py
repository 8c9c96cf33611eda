"""`agent-runtime`: the command line (serve, api, worker, migrate, token, run).

Settings come from the environment and `.env` (see `.env.example`); flags override a few. Every
command that needs a database resolves it the same way (`app.serve.resolve_database`):
DATABASE_URL if set, else the embedded Postgres in AGENT_RUNTIME_DATA_DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import httpx

    from app.config import Settings

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130

API_PREFIX = "/api/agent-runtime"
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


class CliError(Exception):
    """A user-facing error: printed as `error: …`, exit code 2."""


# --------------------------------------------------------------------------- parser


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

    p = sub.add_parser(
        "api",
        help="run only the HTTP API (what `serve` starts; one per container)",
        description="Run the HTTP API with uvicorn until SIGINT/SIGTERM.",
    )
    p.add_argument("--host", help="bind address (default: HOST, 127.0.0.1)")
    p.add_argument("--port", type=_port, help="HTTP port (default: PORT, 8000)")
    p.set_defaults(handler=cmd_api)

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

    p = sub.add_parser(
        "migrate",
        help="apply database migrations and print the revision",
        description="Apply every pending migration to DATABASE_URL (or the embedded Postgres).",
    )
    p.set_defaults(handler=cmd_migrate)

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
        "--ttl", type=_positive_int, default=86400, help="lifetime in seconds (default 86400)"
    )
    p.set_defaults(handler=cmd_token)

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
    p.add_argument("--url", help="server base URL (default: http://HOST:PORT)")
    p.add_argument("--token", help="bearer token (default: minted from the local secret)")
    p.add_argument("--user", default="dev", help="user to mint a token for (default: dev)")
    p.add_argument("--tenant", help="tenant to mint a token for (default: the user's own)")
    p.set_defaults(handler=cmd_run)
    return parser


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


# --------------------------------------------------------------------------- commands


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    """`serve`: see `app.serve`."""
    from app.serve import serve

    return serve(settings)


def cmd_api(args: argparse.Namespace, settings: Settings) -> int:
    """`api`: uvicorn serving `create_app(settings)`."""
    import math

    import uvicorn

    from app.api.app import create_app
    from app.auth.secret import ensure_jwt_secret
    from app.logging import register_database_url, register_secret
    from app.serve import database, require_migrated

    with database(settings) as url:
        require_migrated(url)
        secret = ensure_jwt_secret(settings)
        register_secret(secret)
        register_database_url(url)
        resolved = settings.model_copy(update={"database_url": url, "supabase_jwt_secret": secret})
        uvicorn.run(
            create_app(resolved),
            host=resolved.host,
            port=resolved.port,
            log_config=None,  # keep our logging (configure_logging) for uvicorn's loggers
            timeout_graceful_shutdown=max(1, math.ceil(resolved.shutdown_grace_seconds)),
        )
    return EXIT_OK


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    """`worker`: `run_worker` over the resolved database."""
    from app.logging import register_database_url
    from app.serve import database, require_migrated
    from app.worker.main import run_worker

    with database(settings) as url:
        require_migrated(url)
        register_database_url(url)
        run_worker(settings.model_copy(update={"database_url": url}), worker_id=args.worker_id)
    return EXIT_OK


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    """`migrate`: upgrade to head, print the revision."""
    from app.db.migrate import head_revision
    from app.db.urls import redact
    from app.serve import database, migrate

    with database(settings) as url:
        revision = migrate(url)
    head = " (head)" if revision == head_revision() else ""
    print(f"{redact(url)}: at revision {revision}{head}")
    return EXIT_OK


def cmd_token(args: argparse.Namespace, settings: Settings) -> int:
    """`token`: print a JWT."""
    print(_mint(settings, args.user, args.tenant, args.ttl))
    return EXIT_OK


def _mint(settings: Settings, user: str, tenant: str | None, ttl: int = 86400) -> str:
    from app.auth.jwt import mint_token
    from app.auth.secret import ensure_jwt_secret

    return mint_token(
        ensure_jwt_secret(settings),
        user_id=user,
        tenant_id=tenant,
        ttl_seconds=ttl,
        audience=settings.jwt_audience,
    )


# --------------------------------------------------------------------------- `run`: SSE client


@dataclass
class SSEEvent:
    """One server-sent event."""

    id: str | None
    event: str
    data: str


@dataclass
class SSEParser:
    """Line-by-line Server-Sent Events parser (the WHATWG rules that matter to us).

    Feed it lines without their line terminator; it returns an event at each blank line that ends
    one with data. Comments (`:` lines, our keep-alives) and unknown fields are ignored.
    """

    _data: list[str] = field(default_factory=list)
    _event: str = ""
    _id: str | None = None

    def feed(self, line: str) -> SSEEvent | None:
        """Consume one line; return the event it completes, if any."""
        if line == "":
            if not self._data:
                self._event = ""
                return None
            event = SSEEvent(
                id=self._id, event=self._event or "message", data="\n".join(self._data)
            )
            self._data, self._event = [], ""
            return event  # the id persists to later events, as the spec says
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None


def _symbols(stream: TextIO) -> dict[str, str]:
    fancy = {"call": "→", "ok": "←", "fail": "✗", "done": "✓", "stop": "■", "sep": "·"}
    try:
        "".join(fancy.values()).encode(getattr(stream, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return {"call": "->", "ok": "<-", "fail": "x", "done": "ok", "stop": "#", "sep": "-"}
    return fancy


def _one_line(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = text.replace("\r", "").replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe_error(error: Any) -> str:
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message")
        if code and message:
            return f"{code}: {message}"
        return str(message or code or json.dumps(error))
    return str(error)


class Renderer:
    """Turns run events into terminal output; `handle` returns the exit code at the end."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.sym = _symbols(out)
        color = out.isatty() and not os.environ.get("NO_COLOR")
        self._dim, self._red, self._green, self._reset = (
            ("\033[2m", "\033[31m", "\033[32m", "\033[0m") if color else ("", "", "", "")
        )
        self.last_seq = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self._inline = False  # text written without its newline yet
        self._streamed = False  # deltas seen for the current assistant message
        self._any_text = False
        self._thinking = False  # inside a run of thinking.delta chunks

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def end_line(self) -> None:
        """Finish a line of streamed text, if one is open."""
        if self._inline:
            self._write("\n")
            self._inline = False

    def _line(self, text: str, style: str = "") -> None:
        self.end_line()
        self._write(f"{style}{text}{self._reset if style else ''}\n")

    def _text(self, text: str) -> None:
        if text:
            self._write(text)
            self._inline = not text.endswith("\n")
            self._any_text = True

    def handle(self, event: dict[str, Any]) -> int | None:
        """Render one event (the SSE `data` object); the exit code if it ends the run."""
        seq = event.get("seq")
        if isinstance(seq, int):
            if seq <= self.last_seq:
                return None  # already shown (a resumed stream may repeat nothing, but be safe)
            self.last_seq = seq
        kind = event.get("type")
        if kind != "thinking.delta" and self._thinking:
            self.end_line()
            self._thinking = False
        if kind == "assistant.delta":
            self._text(str(event.get("text", "")))
            self._streamed = True
        elif kind == "thinking.delta":
            if not self._thinking:
                self.end_line()
                self._thinking = True
            text = str(event.get("text", ""))
            if text:
                self._write(f"{self._dim}{text}{self._reset}")
                self._inline = not text.endswith("\n")
        elif kind == "assistant.message":
            if not self._streamed:
                self._text(str(event.get("text") or ""))
            self._streamed = False
            self.end_line()
        elif kind == "assistant.reset":
            self._streamed = False
            self._line(
                "(the model call restarted; its partial answer above is discarded)", self._dim
            )
        elif kind == "model.retry":
            reason = _one_line(event.get("reason") or "transient error", 120)
            delay = event.get("delaySeconds")
            when = f" in {delay} s" if delay is not None else ""
            attempt = event.get("attempt")
            self._line(f"(model call failed: {reason}; retry {attempt}{when})", self._dim)
        elif kind == "tool.started":
            args = _one_line(event.get("args", {}))
            self._line(f"{self.sym['call']} tool {event.get('name')} {args}", self._dim)
        elif kind == "tool.completed":
            self._line(f"{self.sym['ok']} ok: {_one_line(event.get('result'))}", self._dim)
        elif kind == "tool.failed":
            error = _one_line(_describe_error(event.get("error")))
            self._line(f"{self.sym['fail']} failed: {error}", self._red)
        elif kind == "approval.required":
            self._approval_required(event)
        elif kind == "approval.resolved":
            self._line(f"({_decision(event)})", self._dim)
        elif kind in ("plan.created", "plan.updated"):
            self._plan(event)
        elif kind == "plan.step":
            reason = f": {_one_line(event['reason'], 120)}" if event.get("reason") else ""
            self._line(f"(step {event.get('index')} {event.get('status')}{reason})", self._dim)
        elif kind == "context.compacted":
            self._line(
                f"(context compacted: messages {event.get('fromSeq')}–{event.get('toSeq')} "
                f"summarised, {event.get('tokensBefore')} → {event.get('tokensAfter')} tokens)",
                self._dim,
            )
        elif kind == "context.compaction_failed":
            error = _one_line(_describe_error(event.get("error")), 160)
            self._line(f"(context compaction failed: {error})", self._dim)
        elif kind == "usage":
            self.input_tokens += int(event.get("inputTokens") or 0)
            self.output_tokens += int(event.get("outputTokens") or 0)
        elif kind == "run.requeued":
            self._line("(its worker stopped; the run went back to the queue)", self._dim)
        elif kind == "run.resumed":
            self._line("(resumed by a worker after the previous attempt ended)", self._dim)
        elif kind == "run.completed":
            result = event.get("result")
            if not self._any_text and isinstance(result, dict) and result.get("text"):
                self._text(str(result["text"]))
            usage = ""
            if self.input_tokens or self.output_tokens:
                usage = (
                    f" {self.sym['sep']} {self.input_tokens} tokens in, {self.output_tokens} out"
                )
            self._line(f"{self.sym['done']} completed{usage}", self._green)
            return EXIT_OK
        elif kind == "run.failed":
            error = _describe_error(event.get("error"))
            self._line(f"{self.sym['fail']} run failed: {error}", self._red)
            return EXIT_RUN_FAILED
        elif kind == "run.cancelled":
            self._line(f"{self.sym['stop']} cancelled", self._red)
            return EXIT_RUN_FAILED
        return None

    def _approval_required(self, event: dict[str, Any]) -> None:
        args = _one_line(event.get("args", {}), 160)
        why = f"{event.get('reason')}, risk {event.get('risk')}"
        self._line(
            f"{self.sym['stop']} waiting for approval: tool {event.get('tool')} {args} ({why})",
            self._red,
        )
        self._line(
            f"  decide: POST /api/agent-runtime/approvals/{event.get('approvalId')} "
            '{"decision": "approve"} or {"decision": "deny"}',
            self._dim,
        )

    def _plan(self, event: dict[str, Any]) -> None:
        plan = event.get("plan")
        steps = plan.get("steps", []) if isinstance(plan, dict) else []
        title = "plan" if event.get("type") == "plan.created" else "revised plan"
        self._line(f"{title}:", self._dim)
        for step in steps if isinstance(steps, list) else []:
            if isinstance(step, dict):
                status = step.get("status")
                mark = "" if status in (None, "pending") else f" ({status})"
                desc = _one_line(step.get("description", ""), 160)
                self._line(f"  {step.get('index')}. {desc}{mark}", self._dim)


def _decision(event: dict[str, Any]) -> str:
    """An `approval.resolved` event in words."""
    decision = event.get("decision")
    if decision == "expired":
        return "the approval expired: the call is refused"
    who = f" by {event.get('decidedBy')}" if event.get("decidedBy") else ""
    reason = f": {_one_line(event['reason'], 120)}" if event.get("reason") else ""
    verb = "approved" if decision == "approve" else "denied"
    return f"{verb}{who}{reason}"


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        text = _describe_error(error)
        return f"{text} (field: {error['field']})" if error.get("field") else text
    except Exception:  # noqa: BLE001 - not our error shape: show what the server said
        return f"HTTP {response.status_code}: {response.text[:300]}"


def _stream_events(client: httpx.Client, run_id: str, last_seq: int) -> Iterator[dict[str, Any]]:
    """One connection to the run's SSE stream, resuming after `last_seq`."""
    headers = {"Last-Event-ID": str(last_seq)} if last_seq else {}
    with client.stream(
        "GET", f"{API_PREFIX}/stream", params={"runId": run_id}, headers=headers
    ) as response:
        if response.status_code != 200:
            response.read()
            raise CliError(f"stream: {_error_text(response)}")
        parser = SSEParser()
        for line in response.iter_lines():
            event = parser.feed(line)
            if event is None:
                continue
            try:
                data = json.loads(event.data)
            except ValueError:
                continue
            if isinstance(data, dict):
                yield data


def follow_run(
    client: httpx.Client, run_id: str, renderer: Renderer, *, deadline: float | None = None
) -> int:
    """Render the run's events until it ends, reconnecting (with Last-Event-ID) if cut off."""
    import httpx

    failures = 0
    while True:
        try:
            for data in _stream_events(client, run_id, renderer.last_seq):
                failures = 0
                code = renderer.handle(data)
                if code is not None:
                    return code
                if deadline is not None and time.monotonic() > deadline:
                    return EXIT_RUN_FAILED
            reason = "the stream ended before the run did"
        except httpx.TransportError as e:
            reason = f"{type(e).__name__}: {e}"
        failures += 1
        if failures > 5 or (deadline is not None and time.monotonic() > deadline):
            renderer.end_line()
            raise CliError(f"lost the event stream of run {run_id} ({reason})")
        time.sleep(min(2.0, 0.25 * 2**failures))


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    """`run`: POST a message, stream the run to the terminal; Ctrl-C cancels it."""
    import httpx

    from app.serve import base_url

    url = (args.url or base_url(settings)).rstrip("/")
    token = args.token or _mint(settings, args.user, args.tenant)
    body: dict[str, Any] = {"message": args.message}
    if args.session:
        body["sessionKey"] = args.session
    if args.agent:
        body["agentId"] = args.agent
    timeout = httpx.Timeout(10.0, read=max(60.0, settings.sse_keepalive_seconds * 3))
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout
    ) as client:
        try:
            response = client.post(API_PREFIX, json=body)
        except httpx.TransportError as e:
            raise CliError(f"cannot reach {url} ({e}); is `agent-runtime serve` running?") from e
        if response.status_code != 202:
            raise CliError(f"POST {API_PREFIX}: {_error_text(response)}")
        run = response.json()
        run_id = str(run["runId"])
        print(
            f"run {run_id} · session {run.get('sessionKey')} · Ctrl-C cancels",
            file=sys.stderr,
            flush=True,
        )
        renderer = Renderer(sys.stdout)
        try:
            return follow_run(client, run_id, renderer)
        except KeyboardInterrupt:
            renderer.end_line()
            print("cancelling… (Ctrl-C again to quit now)", file=sys.stderr, flush=True)
            try:
                cancel = client.post(f"{API_PREFIX}/cancel", params={"runId": run_id})
                if cancel.status_code >= 400:
                    raise CliError(f"cancel: {_error_text(cancel)}") from None
                return follow_run(client, run_id, renderer, deadline=time.monotonic() + 15)
            except KeyboardInterrupt:
                return EXIT_INTERRUPTED
