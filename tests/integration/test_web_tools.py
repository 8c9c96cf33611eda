"""web_fetch and web_search end to end against local servers (no other network is touched).

The fetch target server listens on 127.0.0.2, and the tests that must reach it allow exactly
`127.0.0.2/32` (WEB_ALLOWED_NETWORKS). A second "secret" server on 127.0.0.1 stands for an internal
service: attacks (direct IPs, odd notations, `localhost`, redirects) must never reach it, and the
tests check that it saw no request. Everything else runs with the default, strict settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gzip
import json
import ssl
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import pytest
import trustme

from app.auth.principal import Principal
from app.config import Settings
from app.core.transcript import ToolCall, ToolResult
from app.db.engine import Database
from app.tools.base import ToolContext, ToolError
from app.tools.registry import ToolRegistry
from app.tools.web import ssrf
from app.tools.web.fetch import FetchLimits, fetch_url
from app.tools.web.ssrf import AddressPolicy
from app.tools.web.tools import web_tools
from tests.integration.raw_http import read_request

TARGET_HOST = "127.0.0.2"
ALLOW_TARGET = {"web_allowed_networks": [f"{TARGET_HOST}/32"]}


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def query(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}


Handler = Callable[[Request, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Server:
    """A tiny HTTP/1.1 server: one request per connection, handlers by path."""

    host: str
    routes: dict[str, Handler] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    sent: dict[str, int] = field(default_factory=dict)
    port: int = 0
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    async def start(self, tls: ssl.SSLContext | None = None) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, 0, ssl=tls)
        self.port = self._server.sockets[0].getsockname()[1]

    def url(self, path: str, scheme: str = "http", host: str | None = None) -> str:
        return f"{scheme}://{host or self.host}:{self.port}{path}"

    async def close(self) -> None:
        self._server.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            method, path, headers, body = await read_request(reader)
            request = Request(method, path, headers, body)
            self.requests.append(request)
            handler = self.routes.get(urlsplit(path).path, not_found)
            await handler(request, writer)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:  # `close` stops a handler that is still sleeping or sending
            pass
        finally:
            self.tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def head(status: int, headers: dict[str, str], length: int | None) -> bytes:
    lines = [f"HTTP/1.1 {status} X", *(f"{k}: {v}" for k, v in headers.items())]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join([*lines, "Connection: close", "", ""])).encode("latin-1")


def reply(
    body: bytes | str, content_type: str = "text/plain", status: int = 200, **extra: str
) -> Handler:
    data = body.encode() if isinstance(body, str) else body

    async def handler(request: Request, writer: asyncio.StreamWriter) -> None:
        writer.write(head(status, {"Content-Type": content_type, **extra}, len(data)) + data)

    return handler


not_found = reply("not found", status=404)


def redirect(location: str, status: int = 302) -> Handler:
    return reply(b"", status=status, Location=location)


async def echo_host(request: Request, writer: asyncio.StreamWriter) -> None:
    await reply(request.headers.get("host", ""))(request, writer)


async def redirect_chain(request: Request, writer: asyncio.StreamWriter) -> None:
    n = int(request.query.get("n", "0"))
    handler = redirect(f"/chain?n={n - 1}") if n > 0 else reply(f"end of chain at {n}")
    await handler(request, writer)


def streaming(server: Server, name: str, total: int, chunk: bytes, pause: float = 0.0) -> Handler:
    async def handler(request: Request, writer: asyncio.StreamWriter) -> None:
        writer.write(head(200, {"Content-Type": "text/plain"}, total))
        server.sent[name] = 0
        while server.sent[name] < total:
            writer.write(chunk)
            await writer.drain()
            server.sent[name] += len(chunk)
            if pause:
                await asyncio.sleep(pause)

    return handler


async def slow_headers(request: Request, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(5)


@functools.cache
def gzip_bomb() -> bytes:
    """32 MiB of "a" in about 32 KiB of gzip."""
    return gzip.compress(b"a" * (32 * 2**20), compresslevel=6)


PAGE = """<html><head><title>Test page</title><script>alert('x')</script></head>
<body><main><h1>Hello</h1><p>See <a href="/json">the data</a>.</p></main></body></html>"""


@pytest.fixture
async def secret() -> AsyncIterator[Server]:
    """The "internal service" on 127.0.0.1 that no attack may reach."""
    server = Server("127.0.0.1")
    server.routes["/secret"] = reply("TOP SECRET")
    await server.start()
    yield server
    await server.close()
    assert server.requests == [], "an internal service was reached"


@pytest.fixture
async def target(secret: Server) -> AsyncIterator[Server]:
    """The fetchable server on 127.0.0.2 (allowed only where a test says so)."""
    server = Server(TARGET_HOST)
    server.routes.update(
        {
            "/page": reply(PAGE, "text/html; charset=utf-8"),
            "/text": reply("plain text", "text/plain"),
            "/json": reply('{"ok": true}', "application/json"),
            "/latin1": reply("café".encode("latin-1"), "text/plain; charset=iso-8859-1"),
            "/missing": reply("<h1>gone</h1>", "text/html", status=404),
            "/image": reply(b"\x89PNG\r\n\x1a\n" + b"\0" * 100, "image/png"),
            "/octet-binary": reply(b"\x00\x01\x02binary", "application/octet-stream"),
            "/octet-text": reply(b"just text", "application/octet-stream"),
            "/host": echo_host,
            "/chain": redirect_chain,
            "/to-secret": redirect(secret.url("/secret")),
            "/to-localhost": redirect(secret.url("/secret", host="localhost"), 307),
            "/to-mapped": redirect(secret.url("/secret", host="[::ffff:127.0.0.1]"), 301),
            "/to-metadata": redirect("http://169.254.169.254/latest/meta-data/"),
            "/to-file": redirect("file:///etc/passwd"),
            "/huge": streaming(server, "huge", 64 * 2**20, b"a" * 65536),
            "/drip": streaming(server, "drip", 1000, b"x", pause=0.05),
            "/slow": slow_headers,
            "/bomb": reply(gzip_bomb(), "text/plain", **{"Content-Encoding": "gzip"}),
        }
    )
    await server.start()
    yield server
    await server.close()


def context(**settings: Any) -> ToolContext:
    return ToolContext(
        db=cast(Database, None),  # the web tools never touch the database
        principal=Principal(user_id="alice", tenant_id="acme"),
        session_id=uuid.uuid4(),
        run_id=uuid.uuid4(),
        settings=Settings(**({"web_search_api_key": None} | settings)),
    )


async def call(name: str, args: dict[str, Any], **settings: Any) -> ToolResult:
    ctx = context(**settings)
    registry = ToolRegistry(web_tools(ctx.settings))
    return await registry.execute(ctx, ToolCall(id="c1", name=name, args=args))


async def fetch(url: str, **settings: Any) -> ToolResult:
    return await call("web_fetch", {"url": url}, **settings)


# --- web_fetch: what it returns ------------------------------------------------------------------


async def test_html_becomes_markdown(target: Server) -> None:
    result = await fetch(target.url("/page"), **ALLOW_TARGET)
    assert result.ok, result.error
    assert result.result == {
        "url": target.url("/page"),
        "status": 200,
        "contentType": "text/html",
        "title": "Test page",
        "content": f"# Hello\n\nSee [the data]({target.url('/json')}).",
        "truncated": False,
    }
    assert target.requests[0].headers["user-agent"].startswith("agent-runtime")


async def test_text_json_and_charsets(target: Server) -> None:
    for path, content, ctype in [
        ("/text", "plain text", "text/plain"),
        ("/json", '{"ok": true}', "application/json"),
        ("/latin1", "café", "text/plain"),
        ("/octet-text", "just text", "application/octet-stream"),
    ]:
        result = await fetch(target.url(path), **ALLOW_TARGET)
        assert result.ok, result.error
        assert (result.result["content"], result.result["contentType"]) == (content, ctype)
        assert "title" not in result.result


async def test_error_statuses_are_returned(target: Server) -> None:
    result = await fetch(target.url("/missing"), **ALLOW_TARGET)
    assert result.ok and result.result["status"] == 404 and result.result["content"] == "# gone"


async def test_binary_is_refused(target: Server) -> None:
    image = await fetch(target.url("/image"), **ALLOW_TARGET)
    assert not image.ok and "image/png, not text" in (image.error or "")
    octet = await fetch(target.url("/octet-binary"), **ALLOW_TARGET)
    assert not octet.ok and "looks binary" in (octet.error or "")


async def test_max_chars_truncates(target: Server) -> None:
    result = await call("web_fetch", {"url": target.url("/text"), "max_chars": 5}, **ALLOW_TARGET)
    assert result.result["content"] == "plain" and result.result["truncated"]


async def test_hostname_is_pinned_to_the_checked_address(
    target: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pinned.test` exists only in our resolver: the connection goes to the address it gave,
    resolved once, and the server still sees the name in `Host`."""
    calls: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        calls.append(host)
        return [TARGET_HOST]

    monkeypatch.setattr(ssrf, "system_resolve", resolve)
    result = await fetch(target.url("/host", host="pinned.test"), **ALLOW_TARGET)
    assert result.ok, result.error
    assert result.result["content"] == f"pinned.test:{target.port}"
    assert calls == ["pinned.test"]


async def test_https_sends_sni_and_verifies_the_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Connecting to the pinned IP keeps TLS about the name: SNI and certificate check use it."""
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("pinned.test").configure_cert(server_ctx)
    seen_sni: list[str | None] = []
    server_ctx.sni_callback = lambda _sock, name, _ctx: seen_sni.append(name)
    server = Server(TARGET_HOST, routes={"/host": echo_host})
    await server.start(tls=server_ctx)

    async def resolve(host: str, port: int) -> list[str]:
        return [TARGET_HOST]

    monkeypatch.setattr(ssrf, "system_resolve", resolve)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    policy = AddressPolicy.from_settings(Settings(**ALLOW_TARGET))
    limits = FetchLimits(max_bytes=10_000, timeout=5, max_redirects=0, user_agent="t")
    try:
        fetched = await fetch_url(
            server.url("/host", "https", "pinned.test"), policy=policy, limits=limits,
            ssl_context=client_ctx,
        )  # fmt: skip
        assert fetched.text() == f"pinned.test:{server.port}"
        assert seen_sni == ["pinned.test"]
        with pytest.raises(ToolError, match="CERTIFICATE_VERIFY_FAILED"):
            await fetch_url(
                server.url("/host", "https"), policy=policy, limits=limits, ssl_context=client_ctx
            )
    finally:
        await server.close()


# --- web_fetch: limits ---------------------------------------------------------------------------


async def test_redirects_are_followed_up_to_the_limit(target: Server) -> None:
    ok = await fetch(target.url("/chain?n=3"), web_fetch_max_redirects=3, **ALLOW_TARGET)
    assert ok.ok and ok.result["content"] == "end of chain at 0"
    assert ok.result["url"] == target.url("/chain?n=0")
    too_many = await fetch(target.url("/chain?n=4"), web_fetch_max_redirects=3, **ALLOW_TARGET)
    assert not too_many.ok and "more than 3 redirects" in (too_many.error or "")


async def test_oversize_body_is_cut_without_reading_it_all(target: Server) -> None:
    result = await fetch(
        target.url("/huge"),
        web_fetch_max_bytes=100_000,
        web_fetch_max_chars=200_000,
        **ALLOW_TARGET,
    )
    assert result.ok and result.result["truncated"]
    assert result.result["content"] == "a" * 100_000
    await asyncio.sleep(0.2)  # let the server notice the closed connection
    assert target.sent["huge"] < 32 * 2**20  # of 64 MiB: the rest was never read


async def test_compressed_bomb_is_cut_at_the_cap(target: Server) -> None:
    result = await fetch(
        target.url("/bomb"),
        web_fetch_max_bytes=100_000,
        web_fetch_max_chars=200_000,
        **ALLOW_TARGET,
    )
    assert result.ok and result.result["truncated"]
    assert result.result["content"] == "a" * 100_000


async def test_slow_server_times_out(target: Server) -> None:
    for path in ("/slow", "/drip"):  # no answer at all; an answer that never ends
        started = asyncio.get_running_loop().time()
        result = await fetch(target.url(path), web_fetch_timeout_seconds=0.5, **ALLOW_TARGET)
        assert not result.ok and "timed out after 0.5 s" in (result.error or "")
        assert asyncio.get_running_loop().time() - started < 3


# --- web_fetch: attacks, with the default strict settings ----------------------------------------


async def test_internal_addresses_are_refused(secret: Server) -> None:
    port = secret.port
    for url in [
        f"http://127.0.0.1:{port}/secret",
        f"http://localhost:{port}/secret",
        f"http://2130706433:{port}/secret",
        f"http://0177.0.0.1:{port}/secret",
        f"http://0x7f.1:{port}/secret",
        f"http://127.1:{port}/secret",
        f"http://[::1]:{port}/secret",
        f"http://[::ffff:127.0.0.1]:{port}/secret",
        f"http://[64:ff9b::7f00:1]:{port}/secret",
        f"http://0.0.0.0:{port}/secret",
        f"http://[::]:{port}/secret",
        "http://10.0.0.1/",
        "http://172.16.0.1/",
        "http://192.168.1.1/",
        "http://100.64.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://[fe80::1]/",
        "http://224.0.0.1/",
        "http://255.255.255.255/",
    ]:
        result = await fetch(url)
        assert not result.ok and (result.error or "").startswith("refused: "), (url, result)


async def test_the_test_allowlist_is_exact(secret: Server) -> None:
    result = await fetch(secret.url("/secret"), **ALLOW_TARGET)
    assert result.error == "refused: 127.0.0.1 is a loopback address"


async def test_redirects_to_internal_addresses_are_refused_at_the_hop(target: Server) -> None:
    for path, expected in [
        ("/to-secret", "127.0.0.1 is a loopback address"),
        ("/to-localhost", "localhost resolves to"),
        ("/to-mapped", "(IPv4-mapped 127.0.0.1) is a loopback address"),
        ("/to-metadata", "169.254.169.254 is the cloud metadata address"),
        ("/to-file", "only absolute http and https URLs"),
    ]:
        result = await fetch(target.url(path), **ALLOW_TARGET)
        assert not result.ok, path
        assert result.error and result.error.startswith("refused: ") and expected in result.error
        assert "redirect" in result.error


async def test_names_resolving_inside_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {"intranet.test": ["192.168.0.10"], "mixed.test": ["93.184.216.34", "10.9.8.7"]}

    async def resolve(host: str, port: int) -> list[str]:
        return answers[host]

    monkeypatch.setattr(ssrf, "system_resolve", resolve)
    private = await fetch("http://intranet.test/")
    assert private.error == "refused: intranet.test resolves to 192.168.0.10, a private address"
    mixed = await fetch("https://mixed.test/")  # one public and one private answer
    assert mixed.error == "refused: mixed.test resolves to 10.9.8.7, a private address"


async def test_schemes_and_credentials(target: Server) -> None:
    for url in ["file:///etc/passwd", "ftp://example.com/", "gopher://example.com:70/_x"]:
        result = await fetch(url)
        assert result.error and "only absolute http and https URLs" in result.error
    creds = await fetch(target.url("/text", host=f"user:pw@{TARGET_HOST}"), **ALLOW_TARGET)
    assert creds.error and "credentials" in creds.error
    assert target.requests == []


# --- web_search ----------------------------------------------------------------------------------

BRAVE = {
    "web": {
        "results": [
            {"title": "One &amp; <strong>only</strong>", "url": "https://one.example/",
             "description": "The <strong>first</strong> result &quot;quoted&quot;"},
            {"title": "No URL", "description": "skipped"},
            {"title": "Two", "url": "https://two.example/", "description": "second"},
            {"title": "Three", "url": "https://three.example/", "description": "third"},
        ]
    }
}  # fmt: skip
TAVILY = {"results": [{"title": "T", "url": "https://t.example/", "content": "tav", "score": 1}]}
SERPER = {"organic": [{"title": "S", "link": "https://s.example/", "snippet": "ser"}]}


async def search_api(request: Request, writer: asyncio.StreamWriter) -> None:
    auth = (
        request.headers.get("x-subscription-token")
        or request.headers.get("authorization", "").removeprefix("Bearer ")
        or request.headers.get("x-api-key")
    )
    query = request.query.get("q") or json.loads(request.body or b"{}").get("query") or ""
    if auth != "good-key":
        handler = reply('{"error": "bad key"}', "application/json", status=401)
    elif query == "rate-limited":
        handler = reply('{"error": "slow down"}', "application/json", status=429)
    elif query == "broken":
        handler = reply("oops", status=503)
    elif "x-api-key" in request.headers:
        handler = reply(json.dumps(SERPER), "application/json")
    elif request.path.startswith("/search"):
        handler = reply(json.dumps(TAVILY), "application/json")
    else:
        handler = reply(json.dumps(BRAVE), "application/json")
    await handler(request, writer)


@pytest.fixture
async def search_server() -> AsyncIterator[Server]:
    server = Server("127.0.0.1", routes={"/res/v1/web/search": search_api, "/search": search_api})
    await server.start()
    yield server
    await server.close()


def search_settings(server: Server, provider: str = "brave", key: str = "good-key") -> Any:
    return {
        "web_search_provider": provider,
        "web_search_api_key": key,
        "web_search_base_url": server.url(""),
    }


async def search(server: Server, query: str, count: int | None = None, **kw: Any) -> ToolResult:
    args: dict[str, Any] = {"query": query} | ({"count": count} if count else {})
    ctx = context(**search_settings(server, **kw))
    registry = ToolRegistry(web_tools(ctx.settings))
    return await registry.execute(ctx, ToolCall(id="s1", name="web_search", args=args))


def test_search_is_offered_only_with_a_key() -> None:
    assert [t.name for t in web_tools(Settings(web_search_api_key=None))] == ["web_fetch"]
    assert [t.name for t in web_tools(Settings(web_search_api_key=" "))] == ["web_fetch"]
    tools = web_tools(Settings(web_search_api_key="k"))
    assert [(t.name, t.group, t.risk, t.idempotent) for t in tools] == [
        ("web_fetch", "web", "medium", True),
        ("web_search", "web", "low", True),
    ]


async def test_brave_results_are_normalised(search_server: Server) -> None:
    result = await search(search_server, "python asyncio", count=2)
    assert result.ok, result.error
    assert result.result == {
        "query": "python asyncio",
        "provider": "brave",
        "results": [
            {"title": "One & only", "url": "https://one.example/",
             "snippet": 'The first result "quoted"'},
            {"title": "Two", "url": "https://two.example/", "snippet": "second"},
        ],
    }  # fmt: skip
    sent = search_server.requests[0]
    assert sent.method == "GET" and sent.query == {"q": "python asyncio", "count": "2"}


async def test_tavily_and_serper(search_server: Server) -> None:
    tavily = await search(search_server, "q1", provider="tavily")
    assert tavily.result["results"] == [
        {"title": "T", "url": "https://t.example/", "snippet": "tav"}
    ]
    body = json.loads(search_server.requests[0].body)
    assert body["query"] == "q1" and body["max_results"] == 5
    assert search_server.requests[0].headers["authorization"] == "Bearer good-key"
    serper = await search(search_server, "q2", 3, provider="serper")
    assert serper.result["provider"] == "serper"
    assert serper.result["results"] == [
        {"title": "S", "url": "https://s.example/", "snippet": "ser"}
    ]
    assert json.loads(search_server.requests[1].body) == {"q": "q2", "num": 3}


async def test_search_errors_are_clear(search_server: Server) -> None:
    bad_key = await search(search_server, "x", key="wrong-key")
    assert bad_key.error == "web search failed: brave rejected the API key (HTTP 401)"
    limited = await search(search_server, "rate-limited", provider="tavily")
    assert limited.error and "tavily rate limit or quota exceeded (HTTP 429)" in limited.error
    down = await search(search_server, "broken")
    assert down.error and "brave is unavailable (HTTP 503)" in down.error


async def test_unreachable_provider(search_server: Server) -> None:
    port = search_server.port
    await search_server.close()
    result = await search(search_server, "x")
    assert result.error and "could not reach brave" in result.error
    search_server.port = port
