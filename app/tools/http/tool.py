"""One tenant HTTP tool: a call sends the model's arguments to the endpoint, signed.

The arguments go as a JSON body (GET: as the query string, merged into the URL's own), through
the web tools' guarded transport (`app/tools/web/fetch.py send_request`: the SSRF address policy
of WEB_ALLOW_PRIVATE_NETWORKS / WEB_ALLOWED_NETWORKS, no redirect followed), with the configured
headers and the signature headers (`signing.py`). At most HTTP_TOOLS_MAX_RESPONSE_BYTES of the
answer are read. A 2xx answer is the result: `{"status", "body"}` with the body parsed when it is
JSON, else text (`"truncated": true` and a note when it was cut). Any other status, a timeout or
a refused address is a `ToolError` the model reads.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.tools.base import Tool, ToolContext, ToolError
from app.tools.http.definition import Method, Risk
from app.tools.http.signing import (
    DELIVERY_HEADER,
    RUN_HEADER,
    SIGNATURE_HEADER,
    TOOL_HEADER,
    delivery_id,
    signature,
)
from app.tools.web.fetch import Answer, send_request
from app.tools.web.ssrf import AddressPolicy

USER_AGENT = "agent-runtime/0.1 (http tool)"
ACCEPT = "application/json, text/*;q=0.9, */*;q=0.5"
SNIPPET_CHARS = 500
TIMEOUT_GRACE_SECONDS = 1.0
"""The registry's limit exceeds the request's, so the request's own (clearer) error wins."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how a tool sends its calls (with its decrypted secrets)."""

    url: str
    method: Method
    timeout_seconds: float
    headers: dict[str, str] = field(repr=False)
    signing_secret: str = field(repr=False)


class HttpTool(Tool):
    """A tenant's endpoint as a tool (see the module doc)."""

    group = "http"
    origin = "http"

    def __init__(
        self,
        *,
        name: str,
        description: str,
        parameters: dict[str, Any],
        risk: Risk,
        endpoint: Endpoint,
    ) -> None:
        self.name = name
        self.description = description
        self.parameters = parameters
        self.risk = risk
        self.endpoint = endpoint
        self.timeout_seconds = endpoint.timeout_seconds + TIMEOUT_GRACE_SECONDS
        # GET is safe by HTTP's definition; a repeated call of any other method carries the same
        # delivery id, which the receiver can deduplicate on, but is not re-sent on its own.
        self.idempotent = endpoint.method == "GET"

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """Send the call; the endpoint's 2xx answer (see the module doc), else `ToolError`."""
        ep = self.endpoint
        url, payload = request_of(ep.method, ep.url, args)
        delivery = delivery_id(ctx.run_id, ctx.tool_call_id)
        headers = outgoing_headers(ep.headers, has_body=ep.method != "GET")
        headers += [
            (TOOL_HEADER, self.name),
            (RUN_HEADER, str(ctx.run_id)),
            (DELIVERY_HEADER, delivery),
            (SIGNATURE_HEADER, signature(ep.signing_secret, int(time.time()), delivery, payload)),
        ]
        answer = await send_request(
            ep.method,
            url,
            policy=AddressPolicy.from_settings(ctx.settings),
            max_bytes=ctx.settings.http_tools_max_response_bytes,
            timeout=ep.timeout_seconds,
            headers=headers,
            body=b"" if ep.method == "GET" else payload,
        )
        return result_of(self.name, answer, ctx.settings.http_tools_max_response_bytes)


def request_of(method: str, url: str, args: dict[str, Any]) -> tuple[str, bytes]:
    """The URL to call and the signed payload: the JSON body, or for GET the query string."""
    if method != "GET":
        body = json.dumps(args, ensure_ascii=False, separators=(",", ":")).encode()
        return url, body
    try:
        merged = httpx.URL(url).copy_merge_params(query_params(args))
    except httpx.InvalidURL as exc:
        raise ToolError(f"invalid URL {url!r}: {exc}") from None
    return str(merged), merged.query


def query_params(args: dict[str, Any]) -> list[tuple[str, str | int | float | bool | None]]:
    """Arguments as query parameters: scalars as text (`true`/`false`), arrays as repeated
    parameters, objects as JSON; null arguments are left out."""
    params: list[tuple[str, str | int | float | bool | None]] = []
    for key, value in args.items():
        for item in value if isinstance(value, list) else [value]:
            if item is None:
                continue
            if isinstance(item, bool):
                params.append((key, "true" if item else "false"))
            elif isinstance(item, str | int | float):
                params.append((key, str(item)))
            else:
                params.append((key, json.dumps(item, separators=(",", ":"))))
    return params


def outgoing_headers(configured: dict[str, str], *, has_body: bool) -> list[tuple[str, str]]:
    """The configured headers, with our Accept and User-Agent unless configured, and the JSON
    content type of a body."""
    headers = list(configured.items())
    names = {name.lower() for name in configured}
    if "accept" not in names:
        headers.append(("Accept", ACCEPT))
    if "user-agent" not in names:
        headers.append(("User-Agent", USER_AGENT))
    if has_body:
        headers.append(("Content-Type", "application/json"))
    return headers


def result_of(name: str, answer: Answer, max_bytes: int) -> dict[str, Any]:
    """A 2xx answer as the tool's result; any other status as a `ToolError`."""
    text = answer.text()
    where = _shown_url(answer.url)
    if not 200 <= answer.status < 300:
        snippet = " ".join(text.split())[:SNIPPET_CHARS]
        detail = f"HTTP {answer.status}"
        if 300 <= answer.status < 400:
            location = answer.header("location")
            detail += f" (a redirect{f' to {location}' if location else ''}, not followed)"
        raise ToolError(f"{name}: {where} answered {detail}" + (f": {snippet}" if snippet else ""))
    body: Any = text
    if not answer.truncated and _is_json(answer.content_type) and text.strip():
        try:
            body = json.loads(text)
        except ValueError:
            body = text
    result: dict[str, Any] = {"status": answer.status, "body": body}
    if answer.truncated:
        result["truncated"] = True
        result["note"] = (
            f"the response was longer than {max_bytes} bytes; only its first {max_bytes} bytes "
            "are shown"
        )
    return result


def _is_json(mime: str) -> bool:
    return mime == "application/json" or mime.endswith("+json")


def _shown_url(url: str) -> str:
    """The URL without its query (which may hold the call's arguments)."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(query=None, fragment=None))
