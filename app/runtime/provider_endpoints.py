"""Which base URLs a tenant may point the worker's model calls at (SSRF rule for tenant keys).

A tenant's base URL makes the worker open connections for it, so it gets the same address rule as
`web_fetch` (`app.tools.web.ssrf.AddressPolicy`: public unicast addresses only, plus
WEB_ALLOW_PRIVATE_NETWORKS / WEB_ALLOWED_NETWORKS), and more:

* `https` only; plain `http` only to a loopback host (`localhost`, 127.0.0.0/8, `::1`), which the
  address policy must then also let through (WEB_ALLOWED_NETWORKS, dev and tests);
* no credentials (`user:pass@`), query or fragment in the URL;
* every address the host resolves to must be allowed, checked when the key is stored and again
  whenever the worker builds the tenant's client. The SDKs open their own connections, so a DNS
  answer that changes between that check and a connection is not caught: operators who let
  tenants bring endpoints should also restrict the workers' egress.
"""

from __future__ import annotations

import httpx

from app.config import Settings
from app.tools.base import ToolError
from app.tools.web.ssrf import AddressPolicy, check_url, parse_ip_literal, resolve_checked

_DEFAULT_PORTS = {"http": 80, "https": 443}


class EndpointRefusedError(ValueError):
    """A tenant base URL breaks the rule above (the message says which part)."""


def _loopback(host: str) -> bool:
    if host.lower().rstrip(".") == "localhost":
        return True
    literal = parse_ip_literal(host)
    return literal is not None and literal.is_loopback


def check_syntax(raw: str, settings: Settings) -> httpx.URL:
    """`raw` parsed, or `EndpointRefusedError` for its scheme, credentials, query or IP host."""
    try:
        url = check_url(raw.strip(), AddressPolicy.from_settings(settings))
    except ToolError as exc:
        raise EndpointRefusedError(str(exc).removeprefix("refused: ")) from None
    if url.scheme == "http" and not _loopback(url.host):
        raise EndpointRefusedError("the base URL must use https (http only to a loopback host)")
    if url.query or url.fragment:
        raise EndpointRefusedError("the base URL may not have a query or fragment")
    return url


async def check_endpoint(raw: str, settings: Settings) -> str:
    """`raw` normalised (no trailing `/`) when its syntax and every address of its host are
    allowed; `EndpointRefusedError` otherwise."""
    url = check_syntax(raw, settings)
    host = url.host
    port = url.port or _DEFAULT_PORTS[url.scheme]
    policy = AddressPolicy.from_settings(settings)
    try:
        await resolve_checked(host, port, policy)
    except ToolError as exc:
        raise EndpointRefusedError(str(exc).removeprefix("refused: ")) from None
    return str(url).rstrip("/")
