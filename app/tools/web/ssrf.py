"""SSRF defences of web_fetch: which addresses may be reached, checked where the socket is opened.

* `check_url` refuses what is wrong with a URL itself: a scheme other than http/https, credentials
  (`user:pass@`), or a host that is an IP literal of a refused class - in any notation a resolver
  accepts (`2130706433`, `0177.0.0.1`, `0x7f.1`, `127.1`, `::ffff:127.0.0.1`).
* `GuardedBackend` is the httpcore network backend of the fetcher: it resolves the host itself
  (`resolve_checked`: `loop.getaddrinfo`), refuses the host when ANY answer is refused, and opens
  the socket to one of exactly those checked addresses, so a DNS-rebinding answer between check and
  connect cannot slip through. httpcore still sends the URL's host in `Host` and as TLS SNI (and
  verifies the certificate against it), because the URL itself is never rewritten.
* The policy (`AddressPolicy`): only public unicast addresses. IPv6 forms that carry an IPv4 address
  (IPv4-mapped, IPv4-compatible, NAT64 64:ff9b::/96, 6to4) are judged by that IPv4 address.
  `allow_private` (WEB_ALLOW_PRIVATE_NETWORKS) lifts the refusal of private, loopback, link-local,
  CGNAT and unique-local ranges, but never of cloud metadata addresses, unspecified, multicast,
  broadcast or reserved ones; `allowed_networks` (WEB_ALLOWED_NETWORKS, a dev/test setting) lets
  exactly the listed networks through.

Ports are not restricted: internal services listen on ordinary ports too, so a port list would not
stop SSRF (the address policy does), while public sites legitimately use odd ones.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import TypeVar

import httpcore
import httpx

from app.config import Settings
from app.tools.base import ToolError

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network
T = TypeVar("T")


class AddressRefused(ToolError):
    """web_fetch refused a URL or an address (the message starts with `refused:`)."""


@dataclass(frozen=True, slots=True)
class _Range:
    network: IPNetwork
    what: str
    liftable: bool
    """Whether WEB_ALLOW_PRIVATE_NETWORKS lets it through."""


def _ranges(rows: Iterable[tuple[str, str, bool]]) -> tuple[_Range, ...]:
    return tuple(_Range(ipaddress.ip_network(net), what, lift) for net, what, lift in rows)


# Most specific first: the first range that contains an address names it.
_SPECIAL_RANGES = _ranges(
    [
        ("169.254.169.254/32", "the cloud metadata address", False),
        ("100.100.100.200/32", "a cloud metadata address", False),
        ("fd00:ec2::254/128", "a cloud metadata address", False),
        ("0.0.0.0/8", "an unspecified (this-network) address", False),
        ("10.0.0.0/8", "a private address", True),
        ("100.64.0.0/10", "a carrier-grade NAT (shared) address", True),
        ("127.0.0.0/8", "a loopback address", True),
        ("169.254.0.0/16", "a link-local address", True),
        ("172.16.0.0/12", "a private address", True),
        ("192.0.0.0/24", "an IETF protocol address", False),
        ("192.0.2.0/24", "a documentation address", False),
        ("192.88.99.0/24", "a 6to4 relay anycast address", False),
        ("192.168.0.0/16", "a private address", True),
        ("198.18.0.0/15", "a benchmarking address", False),
        ("198.51.100.0/24", "a documentation address", False),
        ("203.0.113.0/24", "a documentation address", False),
        ("224.0.0.0/4", "a multicast address", False),
        ("255.255.255.255/32", "the broadcast address", False),
        ("240.0.0.0/4", "a reserved address", False),
        ("::/128", "an unspecified address", False),
        ("::1/128", "a loopback address", True),
        ("64:ff9b:1::/48", "a local-use NAT64 address", True),
        ("100::/64", "a discard-only address", False),
        ("2001::/23", "an IETF protocol (e.g. Teredo) address", False),
        ("2001:db8::/32", "a documentation address", False),
        ("fc00::/7", "a unique-local (private) address", True),
        ("fe80::/10", "a link-local address", True),
        ("fec0::/10", "a site-local address", True),
        ("ff00::/8", "a multicast address", False),
    ]
)
_NAT64 = IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE = IPv6Network("::/96")


def embedded_ipv4(ip: IPv6Address) -> tuple[IPv4Address, str] | None:
    """The IPv4 address an IPv6 address stands for (mapped, compatible, NAT64, 6to4), and how."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, "IPv4-mapped"
    if ip in _IPV4_COMPATIBLE and int(ip) > 1:
        return IPv4Address(int(ip) & 0xFFFF_FFFF), "IPv4-compatible"
    if ip in _NAT64:
        return IPv4Address(int(ip) & 0xFFFF_FFFF), "NAT64"
    if ip.sixtofour is not None:
        return ip.sixtofour, "6to4"
    return None


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Which addresses web_fetch may connect to (default: public unicast only)."""

    allow_private: bool = False
    allowed_networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings) -> AddressPolicy:
        """The policy WEB_ALLOW_PRIVATE_NETWORKS and WEB_ALLOWED_NETWORKS describe."""
        return cls(
            allow_private=settings.web_allow_private_networks,
            allowed_networks=tuple(settings.web_allowed_networks),
        )

    def refusal(self, ip: IPAddress) -> str | None:
        """Why `ip` may not be reached, as `"<ip> is <what>"` (None: it may)."""
        found = self._refusal(ip)
        return None if found is None else f"{ip}{found[0]} is {found[1]}"

    def check(self, ip: IPAddress, host: str | None = None) -> None:
        """Raise `AddressRefused` unless `ip` may be reached; `host` is the name or literal given.

        Messages: `127.0.0.1 is a loopback address`, `0x7f.1 means 127.0.0.1, a loopback address`,
        `db.internal resolves to 10.0.0.5, a private address`.
        """
        found = self._refusal(ip)
        if found is None:
            return
        note, what = found
        if host is None or _is_standard_literal(host):
            raise AddressRefused(f"refused: {host or ip}{note} is {what}")
        verb = "resolves to" if parse_ip_literal(host) is None else "means"
        raise AddressRefused(f"refused: {host} {verb} {ip}{note}, {what}")

    def _refusal(self, ip: IPAddress) -> tuple[str, str] | None:
        """(a note on the IPv4 address inside `ip`, what the address is) when refused."""
        if self._listed(ip):
            return None
        note = ""
        if isinstance(ip, IPv6Address) and (inner := embedded_ipv4(ip)) is not None:
            ip, how = inner
            if self._listed(ip):
                return None
            note = f" ({how} {ip})"
        for special in _SPECIAL_RANGES:
            if ip in special.network:
                if special.liftable and self.allow_private:
                    return None
                return note, special.what
        if not ip.is_global or ip.is_reserved or ip.is_multicast:
            return note, "not a public address"
        return None

    def _listed(self, ip: IPAddress) -> bool:
        return any(ip in network for network in self.allowed_networks)


def _is_standard_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


_INET_ATON_PART = re.compile(r"^(0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*)$")


def parse_ip_literal(host: str) -> IPAddress | None:
    """`host` as an IP address, in any notation a resolver accepts (None: it is a name).

    Besides the standard forms this reads what `inet_aton` does: 1 to 4 dot-separated parts, each
    decimal, octal (leading 0) or hex (0x), the last filling the remaining bytes - so
    `2130706433`, `0177.0.0.1`, `0x7f.1` and `127.1` all are 127.0.0.1.
    """
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.removesuffix(".")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or not all(_INET_ATON_PART.match(p) for p in parts):
        return None
    values = [
        int(p[2:] or "0", 16) if p[:2].lower() == "0x" else int(p, 8) if p[0] == "0" else int(p)
        for p in parts
    ]
    *head, last = values
    tail_bits = 8 * (5 - len(parts))
    if any(v > 0xFF for v in head) or last >= 1 << tail_bits:
        return None
    number = 0
    for value in head:
        number = number << 8 | value
    return IPv4Address(number << tail_bits | last)


def check_url(raw: str, policy: AddressPolicy) -> httpx.URL:
    """Parse `raw` and refuse what is wrong with the URL itself (scheme, credentials, IP host)."""
    try:
        url = httpx.URL(raw)
    except httpx.InvalidURL as exc:
        host = _host_of(raw)
        literal = parse_ip_literal(host)
        if literal is not None:
            policy.check(literal, host)
        raise ToolError(f"invalid URL {raw!r}: {exc}") from None
    if url.scheme not in ("http", "https"):
        scheme = f"{url.scheme}:" if url.scheme else "a relative URL"
        raise AddressRefused(
            f"refused: only absolute http and https URLs are fetched, not {scheme}"
        )
    if url.userinfo:
        raise AddressRefused("refused: URLs with credentials (user:password@) are not fetched")
    if not url.host:
        raise ToolError(f"invalid URL {raw!r}: no host")
    literal = parse_ip_literal(url.host)
    if literal is not None:
        policy.check(literal, url.host)
    return url


def _host_of(raw: str) -> str:
    """The host part of a URL that httpx would not parse (only to name a refused IP literal)."""
    match = re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://(?:[^@/?#]*@)?(\[[^\]]*\]|[^:/?#]*)", raw)
    return match.group(1) if match else ""


async def system_resolve(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives for `host` (tests replace this function)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def resolve_checked(host: str, port: int, policy: AddressPolicy) -> list[IPAddress]:
    """The addresses of `host`, each allowed by `policy`; refused if any answer is not."""
    literal = parse_ip_literal(host)
    if literal is not None:
        policy.check(literal, host)
        return [literal]
    try:
        answers = await system_resolve(host, port)
    except OSError as exc:
        raise ToolError(f"could not resolve {host}: {exc.strerror or exc}") from None
    addresses = [ipaddress.ip_address(a) for a in dict.fromkeys(answers)]
    if not addresses:
        raise ToolError(f"could not resolve {host}: no addresses")
    for address in addresses:
        policy.check(address, host=host)
    return addresses


async def connect_checked(
    host: str,
    port: int,
    policy: AddressPolicy,
    connect: Callable[[str], Awaitable[T]],
    retriable: tuple[type[Exception], ...],
) -> T:
    """`connect(address)` to the first of `host`'s checked addresses that answers (the others
    are tried on a `retriable` failure); what every guarded network backend does."""
    addresses = await resolve_checked(host, port, policy)
    failure: Exception | None = None
    for address in addresses:
        try:
            return await connect(str(address))
        except retriable as exc:
            failure = exc
    assert failure is not None
    raise failure


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that connects only to checked addresses (see module doc)."""

    def __init__(
        self, policy: AddressPolicy, inner: httpcore.AsyncNetworkBackend | None = None
    ) -> None:
        self._policy = policy
        self._inner = inner if inner is not None else httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Resolve and check `host`, then connect to the first checked address that answers."""

        async def connect(address: str) -> httpcore.AsyncNetworkStream:
            return await self._inner.connect_tcp(
                address,
                port,
                timeout=timeout,
                local_address=local_address,
                socket_options=socket_options,
            )

        retriable = (httpcore.ConnectError, httpcore.ConnectTimeout)
        return await connect_checked(host, port, self._policy, connect, retriable)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Never: web_fetch only speaks TCP."""
        raise AddressRefused("refused: unix sockets are not reachable")

    async def sleep(self, seconds: float) -> None:
        """Delegate (httpcore's retry back-off)."""
        await self._inner.sleep(seconds)
