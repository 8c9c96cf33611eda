"""Helpers for the MCP client tests: the toolbox server over streamable HTTP (uvicorn in this
process, on 127.0.0.1) or over stdio (in the sandbox), test settings, and storing a server."""

from __future__ import annotations

import asyncio
import base64
import socket
import sys
from pathlib import Path
from typing import Any

import uvicorn

from app.auth.principal import Principal
from app.config import Settings
from app.db.engine import Database
from app.tenants.crypto import Keyring
from app.tools.mcp import store
from app.tools.mcp.config import ServerConfig
from tests.mcp_servers.toolbox import build_toolbox

SECRETS_KEY = "kid1:" + base64.b64encode(bytes(range(32))).decode()
LOCAL = ["127.0.0.1/32"]
TOOLBOX = str(Path(__file__).parents[1] / "mcp_servers" / "toolbox.py")
SITE_PACKAGES = next(p for p in sys.path if p.endswith("site-packages"))
STDIO_PATHS = [SITE_PACKAGES, str(Path(TOOLBOX).parent)]
"""What the sandboxed stdio server needs to see: the SDK and the script (read-only)."""


def mcp_settings(db_url: str | None = None, **overrides: Any) -> Settings:
    """Test settings: loopback reachable, stdio servers on (in the sandbox), a secrets key."""
    values: dict[str, Any] = {
        "database_url": db_url,
        "web_allowed_networks": LOCAL,
        "mcp_stdio_enabled": True,
        "mcp_stdio_readonly_paths": STDIO_PATHS,
        "secrets_key": SECRETS_KEY,
        **overrides,
    }
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def stdio_config(name: str = "local", **fields: Any) -> dict[str, Any]:
    """ServerConfig fields of the toolbox over stdio (the system python, the venv's packages)."""
    return {
        "transport": "stdio",
        "command": "/usr/bin/python3",
        "args": (TOOLBOX,),
        "env": {"PYTHONPATH": SITE_PACKAGES},
        **fields,
    }


async def put_server(database: Database, who: Principal, name: str, **fields: Any) -> None:
    """Store server `name` for `who`'s tenant, as the API would."""
    config = ServerConfig(tenant_id=who.tenant_id, name=name, version=0, **fields)
    async with database.tenant(who) as s:
        await store.put_server(s, who, Keyring.parse(SECRETS_KEY), config)


class HttpToolbox:
    """The toolbox served over streamable HTTP by uvicorn in this event loop; stop and start
    again on the same port to restart it."""

    def __init__(self, port: int = 0) -> None:
        self.events: list[str] = []
        self.port = port
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self) -> HttpToolbox:
        app = build_toolbox(self.events).streamable_http_app()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1)
        server = uvicorn.Server(config)
        self._server = server
        self._task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:  # noqa: ASYNC110 (uvicorn offers no event)
            await asyncio.sleep(0.01)
        return self

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        await asyncio.wait_for(self._task, 10)
        self._server = self._task = None

    async def wait_for_event(self, event: str, timeout: float = 5) -> None:  # noqa: ASYNC109
        deadline = asyncio.get_running_loop().time() + timeout
        while event not in self.events:
            assert asyncio.get_running_loop().time() < deadline, (event, self.events)
            await asyncio.sleep(0.02)
