"""Helpers for the browser test: a second origin serving one page, a TCP proxy the test can cut,
and a headless Chromium (Debian's, driven by Playwright; nothing is downloaded)."""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextlib.contextmanager
def page_server(html: str) -> Iterator[str]:
    """Serve `html` at `/` on a free local port; yields the origin (`http://127.0.0.1:PORT`)."""
    body = html.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.split("#")[0] not in ("/", "/index.html"):
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return  # quiet

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Request:
    """One HTTP request head seen by the proxy."""

    method: str
    target: str
    headers: dict[str, str]


class CuttableProxy:
    """A TCP proxy from a local port to `upstream_port`. `cut()` drops every open connection and
    refuses (accept, then close) new ones until `resume()`: to the browser the server went away."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._sent: list[bytearray] = []  # what each connection's client sent
        self._closed = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._open.is_set():
                client.close()  # the server is "down"
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=2)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            sent = bytearray()
            with self._lock:
                self._sockets |= {client, upstream}
                self._sent.append(sent)
            threading.Thread(target=self._pump, args=(client, upstream, sent), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, None), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bytearray | None) -> None:
        try:
            while chunk := src.recv(65536):
                if record is not None:
                    record.extend(chunk)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            with self._lock:
                self._sockets -= {src, dst}

    def cut(self) -> None:
        """Drop every connection now and refuse new ones until `resume()`."""
        self._open.clear()
        with self._lock:
            sockets = list(self._sockets)
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def resume(self) -> None:
        self._open.set()

    def requests(self) -> list[Request]:
        """Every request head clients sent through the proxy, in order of connection."""
        with self._lock:
            streams = [bytes(s) for s in self._sent]
        found = []
        for raw in streams:
            for m in re.finditer(rb"([A-Z]+) (\S+) HTTP/1\.1\r\n(.*?)\r\n\r\n", raw, re.S):
                headers = {}
                for line in m.group(3).decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                found.append(Request(m.group(1).decode(), m.group(2).decode(), headers))
        return found

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()


@contextlib.contextmanager
def chromium_context(*, bypass_csp: bool = False) -> Iterator[Any]:
    """A fresh headless Chromium profile (Playwright persistent context over /usr/bin/chromium).
    `bypass_csp` lets a test inject its own script (an accessibility checker) into the page."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run `make browser` as root"
    profile = Path(tempfile.mkdtemp(prefix="chromium-profile-"))
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                str(profile),
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_ARGS,
                viewport={"width": 1100, "height": 900},
                bypass_csp=bypass_csp,
            )
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


DOC_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
_scratch_shots = Path(tempfile.mkdtemp(prefix="workbench-shots-"))


def save_screenshot(page: Any, name: str, *, full_page: bool = False) -> Path:
    """Screenshot `page` as `name` (e.g. `workbench-plan.png`). Into `docs/screenshots/` only
    with WORKBENCH_SCREENSHOTS=1 (`make screenshots`), else into a scratch folder, so a test run
    leaves the working tree as it was; either way the page is rendered and captured."""
    import os

    folder = DOC_SCREENSHOTS if os.environ.get("WORKBENCH_SCREENSHOTS") == "1" else _scratch_shots
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    page.screenshot(path=str(path), full_page=full_page)
    return path
