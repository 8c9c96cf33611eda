"""`GET /metrics`: Prometheus text of every process (API and workers) plus the database gauges.

Who may read it (`docs/operations.md`):
- METRICS_PORT set: only on that port (the API's own port answers 404), where the listener's
  bind address (METRICS_HOST, loopback by default) is the protection;
- METRICS_TOKEN set: `Authorization: Bearer <METRICS_TOKEN>` is required (401 without), on
  whichever port serves it;
- neither: only clients on a loopback address that came through no proxy (a request carrying
  `Forwarded`/`X-Forwarded-For` is 404), so a server bound to 0.0.0.0 does not publish it.
"""

from __future__ import annotations

import hmac
import ipaddress

import structlog
from fastapi import APIRouter, Request, Response

from app.api.deps import RuntimeDep
from app.api.errors import ApiError
from app.config import Settings
from app.observability.metrics import render
from app.queue.stats import database_gauges

log = structlog.get_logger(__name__)

router = APIRouter(tags=["operations"])

_PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip")


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request, runtime: RuntimeDep) -> Response:
    """The metrics in the Prometheus text format (OpenMetrics when the scraper asks for it)."""
    check_access(request, runtime.settings)
    try:
        gauges = await database_gauges(runtime.db)
    except Exception as exc:  # a scrape during a database outage still shows the processes
        log.warning("metrics: database gauges unavailable", error_type=type(exc).__name__)
        gauges = None
    body, content_type = render(gauges, request.headers.get("accept", ""))
    return Response(body, media_type=content_type)


def check_access(request: Request, settings: Settings) -> None:
    """Raise the answer for a request that may not read the metrics (404 or 401)."""
    not_found = ApiError(404, "not found")
    if settings.metrics_port is not None and local_port(request) != settings.metrics_port:
        raise not_found
    if settings.metrics_token is not None:
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        expected = settings.metrics_token.get_secret_value()
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), expected.encode()
        ):
            raise ApiError(
                401,
                "GET /metrics needs Authorization: Bearer <METRICS_TOKEN>",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return
    if settings.metrics_port is None and not direct_loopback(request):
        raise not_found


def local_port(request: Request) -> int | None:
    """The port of the listening socket the request came in on."""
    server = request.scope.get("server")
    return server[1] if server else None


def direct_loopback(request: Request) -> bool:
    """Whether the client is on this machine and not relayed by a proxy."""
    if any(name in request.headers for name in _PROXY_HEADERS):
        return False
    host = request.client.host if request.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
