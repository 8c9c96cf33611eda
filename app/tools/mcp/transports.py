"""How the worker reaches an MCP server: streamable HTTP behind the SSRF guard, or stdio in the
code sandbox.

* HTTP: the URL must pass `web_fetch`'s address policy (`app.tools.web.ssrf`: public unicast
  addresses only, plus WEB_ALLOW_PRIVATE_NETWORKS / WEB_ALLOWED_NETWORKS), checked when it is
  stored and on every TCP connection: the SDK gets an httpx2 client whose connection pool
  resolves the host itself, refuses it when any answer is refused, and connects to exactly a
  checked address (DNS rebinding between check and connect cannot slip through). No proxy from
  the environment is used. The SDK follows only same-origin redirects, which the same guard
  checks. The configured headers (secrets) go with every request.
* stdio (only with MCP_STDIO_ENABLED): the command runs inside the same isolation as
  `run_shell` (`app.tools.sandbox.isolation`): bubblewrap with its own pid, ipc, uts and
  (unless SANDBOX_NETWORK) net namespaces, read-only `/usr`, an empty private workspace, the
  sandbox uid, the SANDBOX_* memory, process, file-size and open-file limits and an environment
  of the configured `env` only. MCP_STDIO_READONLY_PATHS are mounted read-only at the same path
  (where the servers' programs live). It is a long-lived process: its CPU limit is
  `STDIO_CPU_SECONDS`, not the per-call wall clock. Its stderr goes to a file in its directory,
  whose tail explains a server that would not start. The env values (secrets) are passed in
  bwrap's own environment, not on its command line, which the host's process list shows to
  every user (`with_private_env`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import httpcore2
import httpx2
from mcp.client._transport import TransportStreams
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client

from app.config import Settings
from app.tools.base import ToolError
from app.tools.mcp.config import ServerConfig
from app.tools.sandbox.detect import isolation_for
from app.tools.sandbox.isolation import Invocation, Isolation
from app.tools.sandbox.layout import Layout, create_layout, remove_layout
from app.tools.sandbox.limits import Limits
from app.tools.web.ssrf import (
    AddressPolicy,
    AddressRefused,
    check_url,
    connect_checked,
    resolve_checked,
)

STDIO_CPU_SECONDS = 3600
"""CPU seconds a stdio server's processes may use in all (RLIMIT_CPU); then it is restarted."""
STDERR_FILE = "stderr.log"
STDERR_TAIL = 500
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


class McpUnavailableError(Exception):
    """The server cannot be reached now; the message says why (shown on `/tools`)."""


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """An httpcore2 network backend that connects only to addresses the policy allows."""

    def __init__(self, policy: AddressPolicy) -> None:
        self._policy = policy
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore2's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        """Resolve and check `host`, then connect to the first checked address that answers."""

        async def connect(address: str) -> httpcore2.AsyncNetworkStream:
            return await self._inner.connect_tcp(
                address,
                port,
                timeout=timeout,
                local_address=local_address,
                socket_options=socket_options,
            )

        retriable = (httpcore2.ConnectError, httpcore2.ConnectTimeout)
        return await connect_checked(host, port, self._policy, connect, retriable)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore2's interface)
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        """Never: MCP servers are reached over TCP only."""
        raise AddressRefused("refused: unix sockets are not reachable")

    async def sleep(self, seconds: float) -> None:
        """Delegate (httpcore2's retry back-off)."""
        await self._inner.sleep(seconds)


class GuardedTransport(httpx2.AsyncHTTPTransport):
    """httpx2's transport over a connection pool that uses `GuardedBackend`."""

    def __init__(self, policy: AddressPolicy) -> None:
        super().__init__(trust_env=False)
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(trust_env=False),
            network_backend=GuardedBackend(policy),
        )


def check_server_url(url: str, settings: Settings) -> str:
    """`url` if its scheme, credentials and IP literal pass the address policy (a host name is
    checked when connecting); `ToolError` (`refused: …`) otherwise."""
    return str(check_url(url.strip(), AddressPolicy.from_settings(settings)))


async def check_server_address(url: str, settings: Settings) -> None:
    """Also resolve the host and refuse it when any address is refused (at write time)."""
    parsed = check_url(url.strip(), AddressPolicy.from_settings(settings))
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    await resolve_checked(parsed.host, port, AddressPolicy.from_settings(settings))


@asynccontextmanager
async def http_transport(
    config: ServerConfig, settings: Settings
) -> AsyncIterator[TransportStreams]:
    """The streamable HTTP transport to `config.url` behind the SSRF guard."""
    assert config.url is not None
    try:
        url = check_server_url(config.url, settings)
    except ToolError as exc:
        raise McpUnavailableError(exc.message) from None
    policy = AddressPolicy.from_settings(settings)
    async with (
        httpx2.AsyncClient(
            transport=GuardedTransport(policy),
            headers=config.headers,
            timeout=HTTP_TIMEOUT,
            follow_redirects=False,
            trust_env=False,
        ) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams


@asynccontextmanager
async def stdio_transport(
    config: ServerConfig, settings: Settings
) -> AsyncIterator[TransportStreams]:
    """The server's command started in the sandbox, spoken to over its stdin and stdout."""
    assert config.command is not None
    if not settings.mcp_stdio_enabled:
        raise McpUnavailableError("stdio MCP servers are disabled on this deployment")
    isolation = await asyncio.to_thread(isolation_for, settings)  # probes once per process
    if not isolation.available:
        raise McpUnavailableError(
            f"the sandbox stdio servers run in is unavailable: {isolation.reason}"
        )
    layout = create_layout(isolation.owner_uid, isolation.inner_uid)
    try:
        params = stdio_parameters(isolation, layout, config, settings)
        with (layout.root / STDERR_FILE).open("w", encoding="utf-8") as errlog:
            try:
                async with stdio_client(params, errlog=errlog) as streams:
                    yield streams
            except McpUnavailableError:
                raise
            except Exception as exc:
                raise McpUnavailableError(_exited(exc, layout)) from exc
    finally:
        remove_layout(layout)


def stdio_parameters(
    isolation: Isolation, layout: Layout, config: ServerConfig, settings: Settings
) -> StdioServerParameters:
    """The command line that starts `config`'s command in `isolation` (see the module doc)."""
    assert config.command is not None
    limits = replace(Limits.from_settings(settings), timeout_seconds=STDIO_CPU_SECONDS)
    inv = isolation.invocation(
        layout,
        [config.command, *config.args],
        limits,
        network=settings.sandbox_network,
        env=dict(config.env),
    )
    argv = with_readonly_binds(inv, settings.mcp_stdio_readonly_paths, isolation)
    env = inv.env
    if isolation.kind == "bubblewrap" and config.env:
        # the values are secrets: through bwrap's own environment, not its command line
        inherited = get_default_environment() | inv.env
        argv = with_private_env(argv, set(inherited), dict(config.env))
        env = inv.env | dict(config.env)
    return StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=inv.cwd)


def with_private_env(argv: list[str], inherited: set[str], private: dict[str, str]) -> list[str]:
    """bwrap's `argv` passing `private` on through bwrap's environment (which only the same user
    may read, in `/proc/<pid>/environ`) instead of `--setenv` arguments (which every user sees
    in the host's process list): `--clearenv` becomes `--unsetenv` of every other variable bwrap
    inherits (`inherited`), and `--setenv` of a private name is dropped."""
    at = argv.index("--clearenv")
    out = argv[:at]
    for name in sorted(inherited - private.keys()):
        out += ["--unsetenv", name]
    at += 1
    while argv[at] == "--setenv":  # the --setenv triples follow --clearenv, up to "--"
        if argv[at + 1] not in private:
            out += argv[at : at + 3]
        at += 3
    return out + argv[at:]


def with_readonly_binds(inv: Invocation, paths: list[str], isolation: Isolation) -> list[str]:
    """`inv.argv` with `--ro-bind-try P P` for each of `paths`, placed before bwrap makes the
    sandbox's root read-only (later mounts could not create their mount points)."""
    argv = list(inv.argv)
    if isolation.kind != "bubblewrap" or not paths:
        return argv
    at = argv.index("--remount-ro")
    binds: list[str] = []
    for path in paths:
        real = os.path.realpath(path)
        binds += ["--ro-bind-try", real, real]
    return argv[:at] + binds + argv[at:]


def _exited(exc: Exception, layout: Layout) -> str:
    """Why a stdio server failed: its stderr's tail, else the exception."""
    tail = ""
    with contextlib.suppress(OSError):
        text = Path(layout.root / STDERR_FILE).read_text(encoding="utf-8", errors="replace")
        tail = text.strip()[-STDERR_TAIL:]
    detail = tail or f"{type(exc).__name__}: {exc}"
    return f"the stdio server failed: {detail}"
