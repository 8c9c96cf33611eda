"""One worker's connection to one MCP server (one version of its configuration).

The SDK's `Client` is an async context manager whose task groups must be entered and left by
the same task, so each connection has an owner task that opens it, hands the client out, and
holds it open until `close`. Runs' tasks call through the client concurrently.

* Connect lazily (`ensure`), bounded by MCP_CONNECT_TIMEOUT_SECONDS; a failure is
  `McpUnavailableError` with a reason for `/tools`.
* The tool listing is fetched page by page and cached; a `notifications/tools/list_changed`
  marks it stale, so the next run lists again. On 2026-07-28 connections change notifications
  only come through a `subscriptions/listen` stream, which the owner keeps open; on older ones
  they arrive on the connection itself. A server that offers neither is listed again after
  `UNWATCHED_LIST_SECONDS`.
* A connection found dead (the stdio process exited, the listen stream dropped) is reopened by
  the next use. A cached listing is served only from a connection heard from within
  `PROBE_AFTER_SECONDS`; a quieter one is pinged first (a server that died without closing its
  streams, a host gone from the network), so runs and `/tools` learn of an outage before a
  call does. A call whose connection breaks while it is in flight fails with a `ToolError`
  saying it may or may not have run; it is not repeated.
* Cancelling a call (the run was cancelled, or its time limit passed) cancels the request: the
  SDK sends `notifications/cancelled` to the server.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anyio
import httpx2
import mcp_types as types
import structlog
from mcp import Client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from app.config import Settings
from app.tools.base import ToolError
from app.tools.mcp.config import ServerConfig
from app.tools.mcp.transports import McpUnavailableError, http_transport, stdio_transport

log = structlog.get_logger(__name__)

MAX_PAGES = 100
"""Pages of a tool listing read at most (a server that paginates forever cannot hang a run)."""
UNWATCHED_LIST_SECONDS = 60.0
"""How long a listing is trusted from a server that sends no change notifications."""
RETRY_SECONDS = 5.0
"""After a failed connect, listings (each run's start, `/tools`) answer with that failure for
this long instead of trying again; calls always try."""
CLOSE_SECONDS = 10.0
PROBE_AFTER_SECONDS = 15.0
"""A connection silent this long is pinged before its cached listing is trusted."""
CLIENT_INFO = types.Implementation(name="agent-runtime", version="0.1")


class McpConnection:
    """A lazily opened connection to `config`'s server, with its cached tool listing."""

    def __init__(self, config: ServerConfig, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.tools: list[types.Tool] | None = None
        """The last listing (kept after the connection fails: runs may still be offered it)."""
        self.last_error: str | None = None
        self.last_used = time.monotonic()
        self.heard_at = 0.0
        """When the server last answered (monotonic): a listing, a call, a ping."""
        self.calls = 0
        """Calls in flight (an idle connection with calls in flight is not closed)."""
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._broken: str | None = None
        self._failed_at: float | None = None
        self._changes = 0
        """Bumped by every list-changed notification."""
        self._listed_at: tuple[int, float] | None = None
        """(`_changes`, monotonic time) when `tools` was fetched."""
        self._watched = False
        """Whether the server sends change notifications (listen stream open, or legacy)."""

    @property
    def connected(self) -> bool:
        """Whether the connection is open and usable."""
        client = self._client
        return (
            client is not None
            and self._broken is None
            and self._owner is not None
            and not self._owner.done()
            and not _dispatcher_closed(client)
        )

    async def ensure(self) -> Client:
        """The open client, (re)connecting when needed; `McpUnavailableError` when it fails."""
        self.last_used = time.monotonic()
        client = self._client
        if client is not None and self.connected:
            return client
        async with self._lock:
            if self._client is not None and self.connected:
                return self._client
            await self.close()
            try:
                client = await self._open()
            except McpUnavailableError as exc:
                self.last_error = str(exc)
                self._failed_at = time.monotonic()
                raise
            self.last_error = self._failed_at = None
            return client

    async def list_tools(self) -> list[types.Tool]:
        """The server's tools: cached unless a change was announced (connects if needed)."""
        failed_at, reason = self._failed_at, self.last_error
        if failed_at is not None and reason and time.monotonic() - failed_at < RETRY_SECONDS:
            raise McpUnavailableError(reason)
        client = await self.ensure()
        if self.tools is not None and not self._stale():
            await self._probe(client)
            return self.tools
        changes = self._changes
        listed: list[types.Tool] = []
        cursor: str | None = None
        try:
            async with asyncio.timeout(self.settings.mcp_connect_timeout_seconds):
                for _ in range(MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    listed.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
        except TimeoutError:
            raise self._failed("listing its tools timed out") from None
        except Exception as exc:
            raise self._failed(f"listing its tools failed: {describe(exc)}") from None
        self.tools = listed
        self._listed_at = (changes, time.monotonic())
        self.heard_at = time.monotonic()
        return listed

    async def _probe(self, client: Client) -> None:
        """Ping a server not heard from for `PROBE_AFTER_SECONDS`; `McpUnavailableError` (and
        the connection marked broken) when it does not answer in time."""
        if time.monotonic() - self.heard_at < PROBE_AFTER_SECONDS:
            return
        try:
            async with asyncio.timeout(self.settings.mcp_connect_timeout_seconds):
                await client.send_ping()
        except TimeoutError:
            raise self._failed("it did not answer a ping in time") from None
        except Exception as exc:
            raise self._failed(f"it did not answer a ping: {describe(exc)}") from None
        self.heard_at = time.monotonic()

    async def call(self, name: str, args: dict[str, Any]) -> types.CallToolResult:
        """Call the server's tool `name`; connection trouble is a `ToolError` for the model."""
        self.calls += 1
        try:
            return await self._call(name, args)
        finally:
            self.calls -= 1
            self.last_used = time.monotonic()

    async def _call(self, name: str, args: dict[str, Any]) -> types.CallToolResult:
        server = self.config.name
        try:
            client = await self.ensure()
        except McpUnavailableError as exc:
            raise ToolError(f"MCP server {server!r} is unavailable: {exc}") from None
        try:
            result = await client.call_tool(name, args)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self._failed("the connection was lost")
                raise ToolError(
                    f"the connection to MCP server {server!r} was lost during the call, which may "
                    "or may not have run; the next call reconnects"
                ) from None
            raise ToolError(f"MCP server {server!r} refused the call: {exc.message}") from None
        except (
            httpx2.HTTPError,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            OSError,
        ) as exc:
            self._failed(f"the connection failed: {describe(exc)}")
            raise ToolError(
                f"the call to MCP server {server!r} failed ({describe(exc)}); it may or may not "
                "have run; the next call reconnects"
            ) from None
        self.heard_at = time.monotonic()
        return result

    async def close(self) -> None:
        """Close the connection (a stdio server is stopped); the cached listing is kept."""
        owner, self._owner = self._owner, None
        self._client = None
        self._broken = None
        if owner is None:
            return
        self._stop.set()
        try:
            async with asyncio.timeout(CLOSE_SECONDS):
                await asyncio.shield(owner)
        except TimeoutError:
            owner.cancel()
            await asyncio.gather(owner, return_exceptions=True)
        except Exception as exc:
            log.debug(
                "MCP connection closed with an error", server=self.config.name, error=repr(exc)
            )

    async def _abort(self) -> None:
        """Stop an owner that never handed a client out (it may be stuck connecting)."""
        owner, self._owner = self._owner, None
        self._client = None
        if owner is not None:
            owner.cancel()
            await asyncio.gather(owner, return_exceptions=True)

    def _stale(self) -> bool:
        if self._listed_at is None:
            return True
        changes, at = self._listed_at
        if changes != self._changes:
            return True
        return not self._watched and time.monotonic() - at > UNWATCHED_LIST_SECONDS

    def _failed(self, reason: str) -> McpUnavailableError:
        """Mark the connection broken (reopened on next use); the error to raise."""
        self._broken = reason
        self.last_error = reason
        return McpUnavailableError(reason)

    async def _open(self) -> Client:
        self._stop = asyncio.Event()
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        owner = asyncio.create_task(self._own(ready, self._stop), name=f"mcp:{self.config.name}")
        self._owner = owner
        try:
            async with asyncio.timeout(self.settings.mcp_connect_timeout_seconds):
                client = await asyncio.shield(ready)
        except TimeoutError:
            ready.add_done_callback(_consume)
            await self._abort()
            limit = self.settings.mcp_connect_timeout_seconds
            raise McpUnavailableError(f"connecting timed out after {limit:g} s") from None
        except McpUnavailableError:
            await self._abort()
            raise
        except Exception as exc:
            await self._abort()
            raise McpUnavailableError(f"cannot connect: {describe(exc)}") from None
        self._client = client
        return client

    async def _own(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Open the client, hand it out through `ready`, hold it until `stop` (see module doc)."""
        transport = (
            http_transport(self.config, self.settings)
            if self.config.transport == "http"
            else stdio_transport(self.config, self.settings)
        )
        listener: asyncio.Task[None] | None = None
        try:
            async with Client(
                transport, message_handler=self._on_message, cache=None, client_info=CLIENT_INFO
            ) as client:
                listener = asyncio.create_task(self._listen(client))
                ready.set_result(client)
                await stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(_unwrap(exc))
            else:
                log.info("MCP connection ended", server=self.config.name, error=describe(exc))
        finally:
            if listener is not None:
                listener.cancel()
                await asyncio.gather(listener, return_exceptions=True)
            if not ready.done():
                ready.set_exception(McpUnavailableError("the connection was closed"))

    async def _listen(self, client: Client) -> None:
        """Keep a `subscriptions/listen` stream for tool list changes open (2026-07-28)."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                self._watched = True
                async for _event in subscription:
                    self._changes += 1
            self._failed("the server closed its change notifications")
        except ListenNotSupportedError:
            # Older protocol: notifications arrive on the connection (`_on_message`) if the
            # server declares them.
            caps = client.server_capabilities.tools
            self._watched = bool(caps is not None and caps.list_changed)
        except MCPError as exc:
            log.info(
                "MCP server offers no change stream", server=self.config.name, error=exc.message
            )
        except Exception as exc:
            self._failed(f"the connection was lost: {describe(exc)}")

    async def _on_message(self, message: Any) -> None:
        """Note list-changed notifications (the listen stream's, or an older server's)."""
        if isinstance(message, types.ToolListChangedNotification):
            self._changes += 1
        await anyio.lowlevel.checkpoint()


def _dispatcher_closed(client: Client) -> bool:
    """Whether the client's connection has ended (the stdio process exited, the stream closed).

    The SDK keeps this on its dispatcher without a public accessor; without one we assume open
    and let the call find out."""
    session = client._session  # noqa: SLF001 - see the docstring
    dispatcher = getattr(session, "_dispatcher", None)
    return bool(getattr(dispatcher, "_closed", False))


def _unwrap(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio wraps transport failures in groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    """A short reason for a failure (the SSRF guard's own message when it refused)."""
    exc = _unwrap(exc)
    if isinstance(exc, ToolError | McpUnavailableError):
        return str(exc)
    if isinstance(exc, MCPError):
        return exc.message
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _consume(future: asyncio.Future[Client]) -> None:
    if not future.cancelled():
        future.exception()
