"""`/mcp` beside the REST API, without a database: a browser's preflight with the MCP headers is
allowed from a CORS origin, an oversized body is the API's JSON 413 before auth, and the route
stays out of the OpenAPI document (the workbench and docs routes are unchanged); building the
MCP server does not touch the process's logging."""

from __future__ import annotations

import logging
from typing import Any

import httpx

from app.api.app import create_app
from app.api.mcp.server import build_server
from app.config import Settings

ORIGIN = "https://app.example.com"


def settings(**values: Any) -> Settings:
    return Settings(_env_file=None, supabase_jwt_secret="s" * 40, **values)  # type: ignore[arg-type]


async def test_a_browser_may_send_the_mcp_headers() -> None:
    app = create_app(settings(cors_origins=ORIGIN))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as client:
        r = await client.options(
            "/mcp",
            headers={
                "Origin": ORIGIN,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type, "
                "mcp-protocol-version, mcp-method, mcp-name, mcp-session-id",
            },
        )
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == ORIGIN


async def test_an_oversized_body_is_413_json_before_auth() -> None:
    transport = httpx.ASGITransport(app=create_app(settings()))
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as client:
        r = await client.post(
            "/mcp",
            content=b"[" + b"1," * (1 << 20) + b"1]",
            headers={"Content-Type": "application/json"},
        )
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "payload_too_large"


def test_mcp_is_not_in_the_openapi_document() -> None:
    app = create_app(settings())
    paths = app.openapi()["paths"]
    assert "/api/agent-runtime" in paths
    assert not any(path.startswith("/mcp") for path in paths)
    routes = {getattr(route, "path", None) for route in app.routes}
    assert {"/mcp", "/workbench", "/docs"} <= routes


def test_building_the_server_leaves_root_logging_alone() -> None:
    """The SDK's MCPServer calls `logging.basicConfig`: with nothing configured yet (an app built
    before logging is set up) that would install its own handler on the root logger."""
    root = logging.getLogger()
    saved = list(root.handlers), root.level
    root.handlers[:] = []
    try:
        build_server("0.0.0")
        assert root.handlers == [] and root.level == saved[1]
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
