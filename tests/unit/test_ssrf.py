"""The web_fetch address policy: every non-public class refused, in every notation, and pinning.

All of these run with the default (strict) policy unless a test says otherwise, and none of them
opens a socket: resolution goes through a replaced `system_resolve` (or the hosts file for
`localhost`), and the backend test records the connect instead of making it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Any

import httpcore
import pytest

from app.config import Settings
from app.tools.base import ToolError
from app.tools.web import ssrf
from app.tools.web.ssrf import (
    AddressPolicy,
    AddressRefused,
    GuardedBackend,
    check_url,
    parse_ip_literal,
    resolve_checked,
)

STRICT = AddressPolicy()

REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("::1", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("fc00::1", "unique-local"),
    ("fd12:3456::1", "unique-local"),
    ("169.254.1.1", "link-local"),
    ("169.254.169.254", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("fe80::1", "link-local"),
    ("100.64.0.1", "carrier-grade NAT"),
    ("100.127.255.255", "carrier-grade NAT"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("::", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("255.255.255.255", "broadcast"),
    ("240.0.0.1", "reserved"),
    ("192.0.2.10", "documentation"),
    ("2001:db8::1", "documentation"),
    ("198.18.0.1", "benchmarking"),
    ("fec0::1", "site-local"),
    # IPv6 forms that carry a refused IPv4 address
    ("::ffff:127.0.0.1", "IPv4-mapped 127.0.0.1"),
    ("::ffff:10.0.0.1", "IPv4-mapped 10.0.0.1"),
    ("::ffff:169.254.169.254", "metadata"),
    ("::127.0.0.1", "IPv4-compatible 127.0.0.1"),
    ("64:ff9b::127.0.0.1", "NAT64 127.0.0.1"),
    ("64:ff9b::a9fe:a9fe", "NAT64 169.254.169.254"),
    ("64:ff9b:1::1", "local-use NAT64"),
    ("2002:7f00:1::1", "6to4 127.0.0.1"),
    ("2001::1", "Teredo"),
]

ALLOWED = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "64:ff9b::808:808"]


@pytest.mark.parametrize(("address", "named"), REFUSED)
def test_non_public_addresses_are_refused(address: str, named: str) -> None:
    ip = ipaddress.ip_address(address)
    reason = STRICT.refusal(ip)
    assert reason is not None and named in reason
    with pytest.raises(AddressRefused, match="^refused: " + re.escape(str(ip))):
        STRICT.check(ip)


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_pass(address: str) -> None:
    assert STRICT.refusal(ipaddress.ip_address(address)) is None


def test_message_names_the_class() -> None:
    with pytest.raises(AddressRefused) as caught:
        STRICT.check(ipaddress.ip_address("127.0.0.1"))
    assert caught.value.message == "refused: 127.0.0.1 is a loopback address"
    with pytest.raises(AddressRefused) as caught:
        STRICT.check(ipaddress.ip_address("10.0.0.5"), host="db.internal")
    assert caught.value.message == "refused: db.internal resolves to 10.0.0.5, a private address"


@pytest.mark.parametrize(
    "host",
    ["2130706433", "0177.0.0.1", "0x7f.1", "0x7F000001", "127.1", "127.0.1", "017700000001",
     "127.0.0.1.", "[::ffff:127.0.0.1]"],
)  # fmt: skip
def test_odd_ipv4_notations_parse(host: str) -> None:
    parsed = parse_ip_literal(host)
    expected = "::ffff:7f00:1" if "ffff" in host else "127.0.0.1"
    assert parsed == ipaddress.ip_address(expected)


@pytest.mark.parametrize(
    "host", ["example.com", "1.2.3.4.nip.io", "08.1", "1.2.3.4.5", "1.256.1.1", ""]
)
def test_names_are_not_literals(host: str) -> None:
    assert parse_ip_literal(host) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://2130706433/",
        "http://0177.0.0.1/",
        "http://0x7f.1/",
        "http://127.1:8080/secret",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[64:ff9b::7f00:1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0:22/",
        "https://[fe80::1]/",
    ],
)
def test_urls_with_refused_ip_hosts(url: str) -> None:
    with pytest.raises(AddressRefused, match="^refused: "):
        check_url(url, STRICT)


def test_odd_notation_message_shows_the_real_address() -> None:
    with pytest.raises(AddressRefused) as caught:
        check_url("http://0x7f.1/", STRICT)
    assert caught.value.message == "refused: 0x7f.1 means 127.0.0.1, a loopback address"


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/x", "gopher://example.com:70/", "/relative"]
)
def test_only_http_and_https(url: str) -> None:
    with pytest.raises(AddressRefused, match="only absolute http and https"):
        check_url(url, STRICT)


@pytest.mark.parametrize("url", ["http://user:pass@example.com/", "https://token@example.com/"])
def test_credentials_refused(url: str) -> None:
    with pytest.raises(AddressRefused, match="credentials"):
        check_url(url, STRICT)


def test_public_url_passes() -> None:
    assert check_url("https://Example.COM/a?b=1", STRICT).host == "example.com"
    assert check_url("http://8.8.8.8:8080/", STRICT).port == 8080


def test_allow_private_lifts_private_but_not_metadata_or_special() -> None:
    relaxed = AddressPolicy(allow_private=True)
    for address in ("127.0.0.1", "10.0.0.1", "192.168.0.1", "100.64.0.1", "fd00::1", "::1"):
        assert relaxed.refusal(ipaddress.ip_address(address)) is None
    for address in ("169.254.169.254", "0.0.0.0", "224.0.0.1", "255.255.255.255", "::"):
        assert relaxed.refusal(ipaddress.ip_address(address)) is not None


def test_allowlist_lets_exactly_its_networks_through() -> None:
    policy = AddressPolicy.from_settings(Settings(web_allowed_networks=["127.0.0.2/32"]))
    assert policy.refusal(ipaddress.ip_address("127.0.0.2")) is None
    assert policy.refusal(ipaddress.ip_address("::ffff:127.0.0.2")) is None
    assert policy.refusal(ipaddress.ip_address("127.0.0.1")) is not None
    assert policy.refusal(ipaddress.ip_address("10.0.0.1")) is not None


def test_default_settings_are_strict() -> None:
    policy = AddressPolicy.from_settings(Settings())
    assert policy == AddressPolicy(allow_private=False, allowed_networks=())


def fake_dns(
    monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[str]], calls: list[str] | None = None
) -> None:
    async def resolve(host: str, port: int) -> list[str]:
        if calls is not None:
            calls.append(host)
        if host not in answers:
            raise OSError(-2, "Name or service not known")
        return answers[host]

    monkeypatch.setattr(ssrf, "system_resolve", resolve)


async def test_name_resolving_to_private_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch, {"intranet.test": ["192.168.10.4"]})
    with pytest.raises(AddressRefused, match="intranet.test resolves to 192.168.10.4, a private"):
        await resolve_checked("intranet.test", 80, STRICT)


async def test_one_bad_answer_refuses_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch, {"mixed.test": ["93.184.216.34", "10.0.0.7"]})
    with pytest.raises(AddressRefused, match="10.0.0.7"):
        await resolve_checked("mixed.test", 443, STRICT)


async def test_localhost_is_refused_by_real_resolution() -> None:
    with pytest.raises(AddressRefused, match="localhost resolves to .* loopback"):
        await resolve_checked("localhost", 80, STRICT)


async def test_unresolvable_name(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch, {})
    with pytest.raises(ToolError, match="could not resolve nowhere.test"):
        await resolve_checked("nowhere.test", 80, STRICT)


class RecordingBackend(httpcore.AsyncNetworkBackend):
    """Records connects instead of making them."""

    def __init__(self) -> None:
        self.connects: list[tuple[str, int]] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.connects.append((host, port))
        raise httpcore.ConnectError("recorded")


async def test_backend_connects_to_the_checked_address_not_the_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    fake_dns(monkeypatch, {"pinned.test": ["93.184.216.34", "2606:2800:220:1::1"]}, calls)
    inner = RecordingBackend()
    with pytest.raises(httpcore.ConnectError):
        await GuardedBackend(STRICT, inner).connect_tcp("pinned.test", 443)
    # Resolved once; every checked address tried, by address: the name is never resolved again.
    assert calls == ["pinned.test"]
    assert inner.connects == [("93.184.216.34", 443), ("2606:2800:220:1::1", 443)]


async def test_backend_refuses_before_connecting(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch, {"rebind.test": ["169.254.169.254"]})
    inner = RecordingBackend()
    backend = GuardedBackend(STRICT, inner)
    with pytest.raises(AddressRefused, match="metadata"):
        await backend.connect_tcp("rebind.test", 80)
    with pytest.raises(AddressRefused):
        await backend.connect_tcp("0x7f.1", 80)
    with pytest.raises(AddressRefused, match="unix"):
        await backend.connect_unix_socket("/var/run/docker.sock")
    assert inner.connects == []
