"""The service commands: `serve`, `api`, `worker` and `migrate`."""

from __future__ import annotations

import argparse
import socket
from typing import TYPE_CHECKING

from app.cli.errors import EXIT_OK
from app.observability.metrics import process_exit, start_worker_listener
from app.observability.tracing import configure_tracing, shutdown_tracing

if TYPE_CHECKING:
    from app.config import Settings


def with_secrets_key(settings: Settings) -> Settings:
    """`settings` with SECRETS_KEY resolved (on the embedded database: the generated key), before
    DATABASE_URL is replaced by the embedded server's URL."""
    from pydantic import SecretStr

    from app.tenants.crypto import secrets_key_text

    text = secrets_key_text(settings)
    return (
        settings if text is None else settings.model_copy(update={"secrets_key": SecretStr(text)})
    )


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

    settings = with_secrets_key(settings)
    with database(settings) as url:
        require_migrated(url)
        secret = ensure_jwt_secret(settings)
        register_secret(secret)
        register_database_url(url)
        resolved = settings.model_copy(update={"database_url": url, "supabase_jwt_secret": secret})
        configure_tracing(resolved, "agent-runtime-api")
        config = uvicorn.Config(
            create_app(resolved),
            host=resolved.host,
            port=resolved.port,
            log_config=None,  # keep our logging (configure_logging) for uvicorn's loggers
            timeout_graceful_shutdown=max(1, math.ceil(resolved.shutdown_grace_seconds)),
        )
        # One server, two sockets when METRICS_PORT is set: /metrics answers only on that one
        # (app/api/metrics_port.py), the API only on its own.
        sockets = [config.bind_socket()]
        if resolved.metrics_port is not None:
            sockets.append(listen_socket(resolved.metrics_host, resolved.metrics_port))
        try:
            uvicorn.Server(config).run(sockets=sockets)
        finally:
            process_exit()
            shutdown_tracing()
    return EXIT_OK


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port), for uvicorn to listen on."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    """`worker`: `run_worker` over the resolved database."""
    from app.logging import register_database_url
    from app.serve import database, require_migrated
    from app.worker.main import run_worker

    settings = with_secrets_key(settings)
    with database(settings) as url:
        require_migrated(url)
        register_database_url(url)
        configure_tracing(settings, "agent-runtime-worker")
        if settings.metrics_port is not None:
            start_worker_listener(settings.metrics_host, settings.metrics_port)
        try:
            run_worker(settings.model_copy(update={"database_url": url}), worker_id=args.worker_id)
        finally:
            process_exit()
            shutdown_tracing()
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
