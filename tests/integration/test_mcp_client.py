"""MCP servers as a tool source, against real MCP servers written with the SDK: the toolbox over
streamable HTTP (uvicorn in this process, shared by the module) and over stdio (started by the
source inside the bubblewrap sandbox). Listing, calling, errors, argument validation, a slow
tool cancelled (by the run and by its time limit: the server sees it), a server restarting,
list changes honoured, a server down, the sandbox and its limits."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from app.auth.principal import Principal
from app.core.transcript import ToolCall, ToolResult
from app.db.engine import Database
from app.tools.base import ToolContext
from app.tools.mcp import connection
from app.tools.mcp.source import McpToolSource
from app.tools.registry import ToolRegistry
from app.tools.sandbox import detect_isolation
from app.tools.sources import SourcedTools
from tests.integration.mcp_support import (
    TOOLBOX,
    HttpToolbox,
    mcp_settings,
    put_server,
    stdio_config,
)

SETTINGS = mcp_settings()
STDIO_SECRET = "stdio-secret-7731-env"


@pytest.fixture(scope="module")
async def toolbox() -> AsyncIterator[HttpToolbox]:
    server = await HttpToolbox().start()
    yield server
    await server.stop()


@pytest.fixture
async def source() -> AsyncIterator[McpToolSource]:
    source = McpToolSource(SETTINGS)
    yield source
    await source.aclose()


def bubblewrap_required() -> None:
    """Fail loudly (not skip) when the machine cannot sandbox (as the sandbox tests do)."""
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is required: apt-get install -y bubblewrap", pytrace=False)
    isolation = detect_isolation("bubblewrap", 65534)
    if not isolation.available:
        pytest.fail(f"bubblewrap cannot sandbox here: {isolation.reason}", pytrace=False)


async def offered(
    source: McpToolSource, database: Database, who: Principal
) -> tuple[ToolRegistry, SourcedTools]:
    sourced = await source.tools_for(database, who, None)
    registry = ToolRegistry(sourced.tools)
    registry.unavailable = sourced.unavailable
    return registry, sourced


async def execute(
    registry: ToolRegistry, database: Database, who: Principal, tool: str, /, **args: Any
) -> ToolResult:
    ctx = ToolContext(database, who, uuid4(), uuid4(), SETTINGS)
    return await registry.execute(ctx, ToolCall(id=f"c-{uuid4().hex[:8]}", name=tool, args=args))


async def test_http_tools_are_listed_namespaced_with_schemas_risk_and_called(
    toolbox: HttpToolbox, source: McpToolSource, database: Database, alice: Principal
) -> None:
    await put_server(
        database,
        alice,
        "box",
        transport="http",
        url=toolbox.url,
        headers={"X-Tenant-Token": "tenant-secret-0451"},
        tool_risk={"add": "high"},
    )
    registry, sourced = await offered(source, database, alice)
    assert sourced.unavailable == []
    tools = {t.name: t for t in registry.tools()}
    assert set(tools) == {
        f"mcp__box__{n}"
        for n in (
            "echo",
            "add",
            "explode",
            "slow",
            "grow",
            "history",
            "header",
            "exists",
            "env",
            "crash",
        )
    }
    add, echo = tools["mcp__box__add"], tools["mcp__box__echo"]
    assert add.parameters["type"] == "object" and set(add.parameters["required"]) == {"a", "b"}
    assert (add.group, add.origin, add.risk, add.idempotent) == ("mcp", "mcp:box", "high", False)
    assert (echo.risk, echo.idempotent) == ("low", True)  # readOnlyHint
    assert tools["mcp__box__explode"].risk == "high"  # destructiveHint
    assert tools["mcp__box__slow"].risk == "medium"  # no hints, no configuration
    assert add.timeout_seconds == SETTINGS.mcp_call_timeout_seconds

    result = await execute(registry, database, alice, "mcp__box__add", a=2, b=40)
    assert result.ok and result.result["structured"] == {"sum": 42}, result
    # the configured header (a secret) reaches the server
    sent = await execute(registry, database, alice, "mcp__box__header", name="x-tenant-token")
    assert sent.ok and sent.result["text"] == "tenant-secret-0451"
    # a tool error is the model's to read
    failed = await execute(registry, database, alice, "mcp__box__explode", message="kaboom")
    assert not failed.ok and failed.error is not None and "kaboom" in failed.error
    # arguments are validated against the tool's schema before the server is asked
    bad = await execute(registry, database, alice, "mcp__box__add", a="two")
    assert not bad.ok and bad.error is not None
    assert bad.error.startswith("invalid arguments for mcp__box__add")
    assert "'b' is a required property" in bad.error


async def test_a_slow_call_is_cancelled_on_the_server_by_its_limit_and_by_the_run(
    toolbox: HttpToolbox, source: McpToolSource, database: Database, alice: Principal
) -> None:
    await put_server(database, alice, "box", transport="http", url=toolbox.url, timeout_seconds=0.5)
    registry, _ = await offered(source, database, alice)
    toolbox.events.clear()
    result = await execute(registry, database, alice, "mcp__box__slow", seconds=30)
    assert not result.ok and result.error == "mcp__box__slow timed out after 0.5 s"
    await toolbox.wait_for_event("slow cancelled")

    toolbox.events.clear()
    call = asyncio.create_task(execute(registry, database, alice, "mcp__box__slow", seconds=30))
    await toolbox.wait_for_event("slow started")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await toolbox.wait_for_event("slow cancelled")
    assert "slow finished" not in toolbox.events
    # the connection is still good for the next call
    again = await execute(registry, database, alice, "mcp__box__echo", text="still here")
    assert again.ok and again.result["text"] == "still here"


async def test_a_list_change_is_seen_by_the_next_run(
    source: McpToolSource, database: Database, alice: Principal
) -> None:
    server = await HttpToolbox().start()  # its own: this test changes its tool list
    try:
        await put_server(database, alice, "grower", transport="http", url=server.url)
        registry, _ = await offered(source, database, alice)
        assert "mcp__grower__late" not in registry.names()
        assert (await execute(registry, database, alice, "mcp__grower__grow")).ok
        for _ in range(100):  # the notification arrives on the listen stream
            registry, _ = await offered(source, database, alice)
            if "mcp__grower__late" in registry.names():
                break
            await asyncio.sleep(0.02)
        late = await execute(registry, database, alice, "mcp__grower__late")
        assert late.ok and late.result["text"] == "late"
    finally:
        await server.stop()


async def test_listings_are_cached_until_a_change_or_a_new_configuration(
    toolbox: HttpToolbox, source: McpToolSource, database: Database, alice: Principal
) -> None:
    await put_server(database, alice, "box", transport="http", url=toolbox.url)
    await offered(source, database, alice)
    conn = source.find("acme", "box")
    assert conn is not None and conn.connected
    first = conn.tools
    await offered(source, database, alice)
    assert conn.tools is first  # not listed again
    # a changed configuration gets a new connection; the old one is closed
    await put_server(database, alice, "box", transport="http", url=toolbox.url, risk="high")
    registry, _ = await offered(source, database, alice)
    assert {t.risk for t in registry.tools()} == {"high"}
    newer = source.find("acme", "box")
    assert newer is not None and newer is not conn and newer.config.version == 2
    await asyncio.sleep(0.1)
    assert not conn.connected


async def test_idle_connections_are_closed_and_reopened_by_the_next_call(
    toolbox: HttpToolbox, database: Database, alice: Principal
) -> None:
    source = McpToolSource(mcp_settings(mcp_idle_seconds=0.3))  # the reaper looks every 1 s
    try:
        await put_server(database, alice, "box", transport="http", url=toolbox.url)
        registry, _ = await offered(source, database, alice)
        conn = source.find("acme", "box")
        assert conn is not None and conn.connected
        for _ in range(150):
            if source.find("acme", "box") is None:
                break
            await asyncio.sleep(0.02)
        assert source.find("acme", "box") is None and not conn.connected
        result = await execute(registry, database, alice, "mcp__box__echo", text="again")
        assert result.ok and result.result["text"] == "again"
        reopened = source.find("acme", "box")
        assert reopened is not None and reopened is not conn and reopened.connected
    finally:
        await source.aclose()


async def test_a_server_down_is_unavailable_and_a_restarted_one_is_used_again(
    source: McpToolSource, database: Database, alice: Principal
) -> None:
    server = await HttpToolbox().start()
    try:
        await put_server(database, alice, "flaky", transport="http", url=server.url)
        registry, sourced = await offered(source, database, alice)
        assert "mcp__flaky__echo" in registry.names() and sourced.unavailable == []

        await server.stop()
        registry, sourced = await offered(source, database, alice)
        [down] = sourced.unavailable
        assert (down.source, down.pattern) == ("mcp:flaky", "mcp__flaky__*")
        assert "ConnectError" in down.reason or "connect" in down.reason.lower(), down.reason
        # the last known tools are still offered; calling one explains the outage
        assert "mcp__flaky__echo" in registry.names()
        result = await execute(registry, database, alice, "mcp__flaky__echo", text="hi")
        assert not result.ok and result.error is not None
        assert result.error.startswith("MCP server 'flaky' is unavailable"), result.error

        await server.start()  # same port
        result = await execute(registry, database, alice, "mcp__flaky__echo", text="back")
        assert result.ok and result.result["text"] == "back"
        _, sourced = await offered(source, database, alice)
        assert sourced.unavailable == []
    finally:
        await server.stop()


async def test_refused_addresses_and_undecryptable_secrets_are_unavailable(
    source: McpToolSource, database: Database, alice: Principal
) -> None:
    await put_server(database, alice, "meta", transport="http", url="http://169.254.169.254/mcp")
    await put_server(database, alice, "intranet", transport="http", url="http://10.1.2.3/mcp")
    _, sourced = await offered(source, database, alice)
    reasons = {u.source: u.reason for u in sourced.unavailable}
    assert reasons == {
        "mcp:meta": "refused: 169.254.169.254 is the cloud metadata address",
        "mcp:intranet": "refused: 10.1.2.3 is a private address",
    }
    # a host name is resolved and checked when connecting (a stored row, or DNS that changed)
    strict = McpToolSource(mcp_settings(web_allowed_networks=[]))
    await put_server(database, alice, "named", transport="http", url="http://localhost:9/mcp")
    try:
        _, sourced = await offered(strict, database, alice)
    finally:
        await strict.aclose()
    named = next(u for u in sourced.unavailable if u.source == "mcp:named")
    assert "refused: localhost resolves to " in named.reason, named.reason
    assert "a loopback address" in named.reason
    # a worker whose SECRETS_KEY lost the server's key id
    await put_server(
        database,
        alice,
        "sealed",
        transport="http",
        url="http://127.0.0.1:9/mcp",
        headers={"A": "b"},
    )
    other = McpToolSource(mcp_settings(secrets_key="kid2:" + "A" * 43 + "="))
    try:
        _, sourced = await offered(other, database, alice)
    finally:
        await other.aclose()
    sealed = next(u for u in sourced.unavailable if u.source == "mcp:sealed")
    assert "cannot be decrypted" in sealed.reason and "kid1" in sealed.reason


async def test_a_server_that_never_answers_times_out_and_is_not_retried_at_once(
    database: Database, alice: Principal
) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # connections queue up; nothing is ever read or answered
    port = silent.getsockname()[1]
    source = McpToolSource(mcp_settings(mcp_connect_timeout_seconds=0.5))
    try:
        await put_server(database, alice, "mute", transport="http", url=f"http://127.0.0.1:{port}/")
        started = time.monotonic()
        _, sourced = await offered(source, database, alice)
        [mute] = sourced.unavailable
        assert mute.reason == "connecting timed out after 0.5 s"
        assert time.monotonic() - started < 3
        # the next run does not wait again: the failure is remembered for a few seconds
        started = time.monotonic()
        _, sourced = await offered(source, database, alice)
        assert [u.reason for u in sourced.unavailable] == [mute.reason]
        assert time.monotonic() - started < 0.3
    finally:
        await source.aclose()
        silent.close()


def cmdlines_with(needle: bytes) -> list[int]:
    """The processes whose command line contains `needle`."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if needle in f.read():
                        found.append(int(pid))
            except OSError:
                continue
    return found


def sandboxed_processes() -> list[int]:
    return cmdlines_with(TOOLBOX.encode())


async def test_stdio_server_in_the_sandbox_lists_calls_cancels_and_restarts(
    database: Database, alice: Principal
) -> None:
    bubblewrap_required()
    source = McpToolSource(SETTINGS)
    try:
        config = stdio_config(tool_risk={"echo": "medium"})
        config["env"] = {**config["env"], "TOOLBOX_TOKEN": STDIO_SECRET}
        await put_server(database, alice, "local", **config)
        registry, sourced = await offered(source, database, alice)
        assert sourced.unavailable == [], sourced.unavailable
        assert {"mcp__local__echo", "mcp__local__slow"} <= set(registry.names())
        assert registry.get("mcp__local__echo").risk == "medium"  # type: ignore[union-attr]
        echo = await execute(registry, database, alice, "mcp__local__echo", text="from stdio")
        assert echo.ok and echo.result["text"] == "from stdio"
        failed = await execute(registry, database, alice, "mcp__local__explode", message="no")
        assert not failed.ok and failed.error is not None and "no" in failed.error

        # its env values (secrets) reach it, but not through any process's command line,
        # which every user of the host can read (only its environment, which only its user can)
        token = await execute(registry, database, alice, "mcp__local__env", name="TOOLBOX_TOKEN")
        assert token.ok and token.result["text"] == STDIO_SECRET
        assert not [pid for pid in cmdlines_with(STDIO_SECRET.encode()) if pid != os.getpid()]
        base = await execute(registry, database, alice, "mcp__local__env", name="HOME")
        assert base.ok and base.result["text"] != os.environ.get("HOME")  # the host's is unset

        # inside the sandbox: not root, the project's code invisible, the SDK visible read-only
        project = str(Path(__file__).parents[2] / "pyproject.toml")  # wherever the clone is
        seen = await execute(registry, database, alice, "mcp__local__exists", path=project)
        assert seen.ok and seen.result["structured"]["exists"] is False, seen.result
        assert seen.result["structured"]["uid"] != 0
        home = await execute(registry, database, alice, "mcp__local__exists", path="/root")
        assert home.ok and home.result["structured"]["exists"] is False

        # a cancelled call is cancelled in the server (which tells its history)
        call = asyncio.create_task(
            execute(registry, database, alice, "mcp__local__slow", seconds=30)
        )
        for _ in range(200):
            history = await execute(registry, database, alice, "mcp__local__history")
            if "slow started" in history.result["structured"]["result"]:
                break
            await asyncio.sleep(0.02)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        for _ in range(100):
            history = await execute(registry, database, alice, "mcp__local__history")
            if "slow cancelled" in history.result["structured"]["result"]:
                break
            await asyncio.sleep(0.02)
        assert history.result["structured"]["result"] == ["slow started", "slow cancelled"]

        # the server dies: that call fails; the next one gets a fresh server
        crashed = await execute(registry, database, alice, "mcp__local__crash")
        assert not crashed.ok and crashed.error is not None
        assert "may or may not have run" in crashed.error, crashed.error
        again = await execute(registry, database, alice, "mcp__local__echo", text="restarted")
        assert again.ok and again.result["text"] == "restarted"
        fresh = await execute(registry, database, alice, "mcp__local__history")
        assert fresh.result["structured"]["result"] == []  # a new process
        assert sandboxed_processes() != []
    finally:
        await source.aclose()
    assert sandboxed_processes() == []  # closing the source stopped the server


async def test_stdio_servers_are_unavailable_when_disabled_or_without_a_sandbox(
    database: Database, alice: Principal
) -> None:
    await put_server(database, alice, "local", **stdio_config())
    for settings, reason in (
        (
            mcp_settings(mcp_stdio_enabled=False),
            "stdio MCP servers are disabled on this deployment",
        ),
        (mcp_settings(sandbox_mode="disabled"), "the sandbox stdio servers run in is unavailable"),
    ):
        source = McpToolSource(settings)
        try:
            registry, sourced = await offered(source, database, alice)
        finally:
            await source.aclose()
        assert registry.names() == []
        [down] = sourced.unavailable
        assert down.source == "mcp:local" and down.reason.startswith(reason), down.reason


class Blackhole:
    """A TCP proxy in front of a server that can go silent: while `silent`, bytes are read and
    dropped and new connections are accepted but never answered (a host gone from the network:
    no FIN, no RST, so only a request that expects an answer finds out)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.silent = False
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> Blackhole:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                if not self.silent:
                    dst.write(data)
                    await dst.drain()

        with contextlib.suppress(Exception):
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def test_a_server_gone_silent_is_found_by_a_ping_before_a_call(
    toolbox: HttpToolbox,
    database: Database,
    alice: Principal,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = await Blackhole(toolbox.port).start()
    source = McpToolSource(mcp_settings(mcp_connect_timeout_seconds=0.5))
    url = f"http://127.0.0.1:{proxy.port}/mcp"
    try:
        await put_server(database, alice, "quiet", transport="http", url=url)
        _, sourced = await offered(source, database, alice)
        assert sourced.unavailable == []
        proxy.silent = True
        # heard from just now: the cached listing is trusted without asking
        registry, sourced = await offered(source, database, alice)
        assert sourced.unavailable == [] and "mcp__quiet__echo" in registry.names()
        # silent for longer than the probe interval: a ping finds the outage
        monkeypatch.setattr(connection, "PROBE_AFTER_SECONDS", 0.0)
        registry, sourced = await offered(source, database, alice)
        [down] = sourced.unavailable
        assert down.source == "mcp:quiet" and "ping" in down.reason, down.reason
        assert "mcp__quiet__echo" in registry.names()  # the last known tools, explained on call
    finally:
        await source.aclose()
        await proxy.stop()
