"""The guarded fetcher behind web_fetch: GET with checked redirects, a byte cap and a time cap.

* Transport: an httpcore connection pool over `GuardedBackend` (see `ssrf.py`), so every
  connection - the first request and each redirect hop - goes to an address the policy allows.
  No proxy settings from the environment are used.
* Redirects are followed by hand, at most `max_redirects` of them; each `Location` goes through
  `check_url` again before it is requested.
* The body is streamed and decoded (gzip/deflate, with bounded output) until `max_bytes`; then the
  connection is dropped, so a huge (or endless, or compressed-bomb) body is never read whole.
* Everything - connects, redirects, body - shares one deadline of `timeout` seconds.
* Content types: HTML and text-like types (text/*, JSON, XML, JS, YAML) are read; known binary
  types are refused before the body is read; a missing or `application/octet-stream` type is
  sniffed from the first bytes.

`send_request` is the same guarded transport for one request of any method, with headers and a
body, that follows no redirect (a 3xx is answered as it is) and does not judge the content type:
the tenants' HTTP tools (`app/tools/http/`) call their endpoints with it.
"""

from __future__ import annotations

import asyncio
import codecs
import functools
import re
import ssl
import zlib
from collections.abc import AsyncIterable, Sequence
from dataclasses import dataclass
from typing import Literal

import httpcore
import httpx

from app.config import Settings
from app.tools.base import ToolError
from app.tools.web.ssrf import AddressPolicy, AddressRefused, GuardedBackend, check_url

Kind = Literal["html", "text"]

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5"
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/ecmascript",
        "application/x-javascript",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/x-ndjson",
        "application/sql",
        "application/graphql",
    }
)
_UNKNOWN_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream"})
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


@dataclass(frozen=True, slots=True)
class FetchLimits:
    """How far one fetch may go."""

    max_bytes: int
    timeout: float
    max_redirects: int
    user_agent: str

    @classmethod
    def from_settings(cls, settings: Settings) -> FetchLimits:
        """The WEB_FETCH_* limits."""
        return cls(
            max_bytes=settings.web_fetch_max_bytes,
            timeout=settings.web_fetch_timeout_seconds,
            max_redirects=settings.web_fetch_max_redirects,
            user_agent=settings.web_user_agent,
        )


@dataclass(frozen=True, slots=True)
class Fetched:
    """A fetched document: final URL, status, type, body (maybe cut at the cap)."""

    url: str
    status: int
    content_type: str
    kind: Kind
    charset: str | None
    body: bytes
    truncated: bool

    def text(self) -> str:
        """The body as text: declared charset, else BOM, else `<meta charset>`, else UTF-8."""
        name = self.charset or _bom_charset(self.body)
        if name is None and self.kind == "html":
            match = _META_CHARSET.search(self.body[:4096])
            name = match.group(1).decode("ascii") if match else None
        try:
            decoder = codecs.getincrementaldecoder(name or "utf-8")(errors="replace")
        except LookupError:
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        # A body cut at the cap may end inside a character: drop that partial character.
        return decoder.decode(self.body, final=not self.truncated)


async def fetch_url(
    url: str,
    *,
    policy: AddressPolicy,
    limits: FetchLimits,
    ssl_context: ssl.SSLContext | None = None,
) -> Fetched:
    """GET `url` within `policy` and `limits`; every failure is a `ToolError`."""
    try:
        async with asyncio.timeout(limits.timeout):
            return await _fetch(url, policy, limits, ssl_context)
    except (TimeoutError, httpcore.TimeoutException):
        raise ToolError(f"timed out after {limits.timeout:g} s fetching {url}") from None
    except httpcore.ConnectError as exc:
        raise ToolError(f"could not connect fetching {url}: {exc or 'connection failed'}") from None
    except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
        raise ToolError(f"fetching {url} failed: {type(exc).__name__}: {exc}") from None


async def _fetch(
    raw_url: str, policy: AddressPolicy, limits: FetchLimits, ssl_context: ssl.SSLContext | None
) -> Fetched:
    url = check_url(raw_url, policy)
    context = ssl_context if ssl_context is not None else _default_ssl_context()
    timeouts = {k: limits.timeout for k in ("connect", "read", "write", "pool")}
    async with httpcore.AsyncConnectionPool(
        ssl_context=context, network_backend=GuardedBackend(policy), retries=0
    ) as pool:
        for hop in range(limits.max_redirects + 1):
            try:
                async with pool.stream(
                    "GET",
                    _core_url(url),
                    headers=_headers(url, limits.user_agent),
                    extensions={"timeout": timeouts},
                ) as response:
                    location = _header(response, b"location")
                    if response.status not in REDIRECT_STATUSES or not location:
                        return await _read(url, response, limits.max_bytes)
                    target = _redirect_target(url, location)
            except AddressRefused as exc:
                if hop == 0:
                    raise
                raise AddressRefused(f"{exc.message} (after a redirect to {url})") from None
            try:
                url = check_url(target, policy)
            except AddressRefused as exc:
                raise AddressRefused(f"{exc.message} (redirect to {target})") from None
    raise ToolError(f"refused: more than {limits.max_redirects} redirects (next: {url})")


@dataclass(frozen=True, slots=True)
class Answer:
    """The answer to one `send_request`: status, type, headers, body (maybe cut at the cap)."""

    url: str
    status: int
    content_type: str
    charset: str | None
    headers: list[tuple[str, str]]
    body: bytes
    truncated: bool

    def text(self) -> str:
        """The body as text: the declared charset, else BOM, else UTF-8 (bad bytes replaced)."""
        name = self.charset or _bom_charset(self.body) or "utf-8"
        try:
            decoder = codecs.getincrementaldecoder(name)(errors="replace")
        except LookupError:
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return decoder.decode(self.body, final=not self.truncated)

    def header(self, name: str) -> str:
        """The first value of header `name` (case-insensitive), or ""."""
        wanted = name.lower()
        return next((v for k, v in self.headers if k.lower() == wanted), "")


async def send_request(
    method: str,
    url: str,
    *,
    policy: AddressPolicy,
    max_bytes: int,
    timeout: float,  # noqa: ASYNC109 (one deadline for connect, send and body)
    headers: Sequence[tuple[str, str]] = (),
    body: bytes = b"",
    ssl_context: ssl.SSLContext | None = None,
) -> Answer:
    """One `method` request of `url` within `policy`: `headers` and `body` sent as given (Host,
    Accept-Encoding and Content-Length are set here), no redirect followed, at most `max_bytes`
    of the body read, everything within `timeout` seconds. Every failure is a `ToolError`."""
    try:
        async with asyncio.timeout(timeout):
            return await _send(method, url, policy, max_bytes, timeout, headers, body, ssl_context)
    except (TimeoutError, httpcore.TimeoutException):
        raise ToolError(f"timed out after {timeout:g} s calling {url}") from None
    except httpcore.ConnectError as exc:
        raise ToolError(f"could not connect to {url}: {exc or 'connection failed'}") from None
    except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
        raise ToolError(f"calling {url} failed: {type(exc).__name__}: {exc}") from None


async def _send(
    method: str,
    raw_url: str,
    policy: AddressPolicy,
    max_bytes: int,
    timeout: float,  # noqa: ASYNC109
    headers: Sequence[tuple[str, str]],
    body: bytes,
    ssl_context: ssl.SSLContext | None,
) -> Answer:
    url = check_url(raw_url, policy)
    context = ssl_context if ssl_context is not None else _default_ssl_context()
    sent = [(b"Host", url.netloc), (b"Accept-Encoding", b"gzip")]
    sent += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    if body or method not in ("GET", "HEAD"):
        sent.append((b"Content-Length", str(len(body)).encode()))
    async with (
        httpcore.AsyncConnectionPool(
            ssl_context=context, network_backend=GuardedBackend(policy), retries=0
        ) as pool,
        pool.stream(
            method,
            _core_url(url),
            headers=sent,
            content=body,
            extensions={"timeout": {k: timeout for k in ("connect", "read", "write", "pool")}},
        ) as response,
    ):
        mime, charset = _parse_content_type(_header(response, b"content-type"))
        decoder = _BodyDecoder(_header(response, b"content-encoding"))
        data, truncated = await _read_capped(response.aiter_stream(), decoder, max_bytes)
        return Answer(
            url=str(url),
            status=response.status,
            content_type=mime,
            charset=charset,
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers],
            body=data,
            truncated=truncated,
        )


@functools.cache
def _default_ssl_context() -> ssl.SSLContext:
    """httpx's verifying context (certifi CAs; SSL_CERT_FILE/SSL_CERT_DIR honoured), built once."""
    return httpx.create_ssl_context()


def _core_url(url: httpx.URL) -> httpcore.URL:
    default_port = 443 if url.scheme == "https" else 80
    return httpcore.URL(
        scheme=url.raw_scheme,
        host=url.raw_host,
        port=url.port or default_port,
        target=url.raw_path,
    )


def _headers(url: httpx.URL, user_agent: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"Host", url.netloc),
        (b"User-Agent", user_agent.encode("latin-1", "replace")),
        (b"Accept", ACCEPT.encode()),
        (b"Accept-Encoding", b"gzip"),
    ]


def _header(response: httpcore.Response, name: bytes) -> str:
    for key, value in response.headers:
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return ""


def _redirect_target(url: httpx.URL, location: str) -> str:
    try:
        return str(url.join(location))
    except httpx.InvalidURL as exc:
        raise ToolError(f"invalid redirect from {url} to {location!r}: {exc}") from None


def _parse_content_type(value: str) -> tuple[str, str | None]:
    mime, _, params = value.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset" and val.strip():
            charset = val.strip().strip("\"'")
    return mime.strip().lower(), charset


def content_kind(mime: str) -> Kind | Literal["unknown", "binary"]:
    """How web_fetch treats a media type (`unknown` is sniffed from the body)."""
    if mime in ("text/html", "application/xhtml+xml"):
        return "html"
    if mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml")):
        return "text"
    if mime in _UNKNOWN_TYPES:
        return "unknown"
    return "binary"


def _sniff(body: bytes) -> Kind | None:
    head = body[:1024].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return "html"
    sample = body[:4096]
    if b"\x00" in sample:
        return None
    try:
        codecs.getincrementaldecoder("utf-8")().decode(sample, final=False)
    except UnicodeDecodeError:
        return None
    return "text"


async def _read(url: httpx.URL, response: httpcore.Response, max_bytes: int) -> Fetched:
    mime, charset = _parse_content_type(_header(response, b"content-type"))
    kind = content_kind(mime)
    if kind == "binary":
        raise ToolError(f"refused: {url} is {mime}, not text (web_fetch reads HTML, text and JSON)")
    decoder = _BodyDecoder(_header(response, b"content-encoding"))
    body, truncated = await _read_capped(response.aiter_stream(), decoder, max_bytes)
    if kind == "unknown":
        sniffed = _sniff(body)
        if sniffed is None:
            shown = mime or "no content type"
            raise ToolError(f"refused: {url} ({shown}) looks binary, not text")
        kind = sniffed
    return Fetched(
        url=str(url),
        status=response.status,
        content_type=mime,
        kind=kind,
        charset=charset,
        body=body,
        truncated=truncated,
    )


async def _read_capped(
    chunks: AsyncIterable[bytes], decoder: _BodyDecoder, max_bytes: int
) -> tuple[bytes, bool]:
    """Up to `max_bytes` decoded bytes; True when more followed (the rest is not read)."""
    body = bytearray()
    async for chunk in chunks:
        body += decoder.decode(chunk, max_bytes - len(body) + 1)
        if len(body) > max_bytes:
            return bytes(body[:max_bytes]), True
    body += decoder.flush()
    if len(body) > max_bytes:
        return bytes(body[:max_bytes]), True
    return bytes(body), False


class _BodyDecoder:
    """Undo gzip/deflate content coding, never producing more output than asked for."""

    def __init__(self, coding: str) -> None:
        codings = [c.strip().lower() for c in coding.split(",") if c.strip()]
        codings = [c for c in codings if c != "identity"]
        self._name = ",".join(codings)
        if not codings:
            self._zlib = None
        elif codings in (["gzip"], ["x-gzip"]):
            self._zlib = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        elif codings == ["deflate"]:
            self._zlib = zlib.decompressobj(wbits=zlib.MAX_WBITS)
        else:
            raise ToolError(f"refused: unsupported content-encoding {coding!r}")

    def decode(self, chunk: bytes, max_length: int) -> bytes:
        """Decoded bytes of `chunk`, at most `max_length` of them (the rest is dropped)."""
        if self._zlib is None:
            return chunk
        try:
            return self._zlib.decompress(chunk, max_length)
        except zlib.error as exc:
            raise ToolError(f"could not decode the {self._name} body: {exc}") from None

    def flush(self) -> bytes:
        """What the decompressor still holds at the end of the body."""
        if self._zlib is None:
            return b""
        try:
            return self._zlib.flush()
        except zlib.error as exc:
            raise ToolError(f"could not decode the {self._name} body: {exc}") from None


def _bom_charset(body: bytes) -> str | None:
    if body.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if body.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    return None
