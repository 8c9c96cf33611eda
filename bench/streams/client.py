"""SSE client process of the streams bench: many concurrent `GET /stream` connections.

Reads a JSON spec (`{"host", "port", "streams": [[run_id, after_seq, token], …]}`), opens every
stream over raw asyncio sockets (resuming after `after_seq`, so no replay is measured), prints
`ready` once every stream has its `200` headers, then records, for each event frame, the delay
between its arrival (this machine's wall clock) and its stored `ts` (`run_events.created_at`, the
database's clock on the same machine). On a `stop` line on stdin it writes the delays and the
counts (events, seq gaps, streams that failed) as JSON to the output path and prints `done`.

    python bench/streams/client.py SPEC.json OUT.json
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

CONNECT_AT_ONCE = 100


class Stats:
    """What every stream of this process records."""

    def __init__(self) -> None:
        self.delays_ms: list[float] = []
        self.arrivals: list[tuple[str, int, float]] = []
        self.events = 0
        self.gaps = 0
        self.failed = 0
        self.connected = 0
        self.recording = True


async def open_stream(host: str, port: int, run_id: str, after: int, token: str) -> Any:
    """Connect and send the request; returns (reader, writer) after the `200` headers."""
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
    writer.write(
        (
            f"GET /api/agent-runtime/stream?runId={run_id}&lastEventId={after} HTTP/1.1\r\n"
            f"Host: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
            "Accept: text/event-stream\r\n\r\n"
        ).encode()
    )
    status = await reader.readline()
    if b" 200 " not in status:
        raise RuntimeError(f"stream {run_id}: {status!r}")
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    return reader, writer


async def follow(reader: asyncio.StreamReader, run_id: str, after: int, stats: Stats) -> None:
    """Read frames until the connection ends; record each event's delay and any seq gap."""
    expected = after + 1
    while True:
        line = await reader.readline()  # chunk-size lines and comments are skipped below:
        if not line:  # each SSE event is sent as one chunk, so a `data:` line is never split
            return
        if not line.startswith(b"data: "):
            continue
        now = time.time()
        data = json.loads(line[6:])
        seq = int(data["seq"])
        if stats.recording:
            stats.delays_ms.append((now - datetime.fromisoformat(data["ts"]).timestamp()) * 1000)
            stats.arrivals.append((run_id, seq, now))
            stats.events += 1
        if seq != expected:
            stats.gaps += 1
        expected = seq + 1


async def main(spec: dict[str, Any], out_path: Path) -> None:
    host, port = spec["host"], int(spec["port"])
    stats = Stats()
    gate = asyncio.Semaphore(CONNECT_AT_ONCE)
    all_up = asyncio.Event()

    def up() -> None:
        if stats.connected + stats.failed == len(spec["streams"]):
            all_up.set()

    writers: list[Any] = []
    tasks: list[asyncio.Task[None]] = []

    async def one(run_id: str, after: int, token: str) -> None:
        async with gate:
            try:
                reader, writer = await open_stream(host, port, run_id, after, token)
            except Exception as exc:
                stats.failed += 1
                print(f"connect failed: {exc}", file=sys.stderr)
                up()
                return
        writers.append(writer)
        stats.connected += 1
        up()
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            await follow(reader, run_id, after, stats)

    for run_id, after, token in spec["streams"]:
        tasks.append(asyncio.create_task(one(run_id, int(after), token)))
    await all_up.wait()
    stats.delays_ms.clear()  # only what arrives after every stream is up counts
    stats.arrivals.clear()
    stats.events = 0
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)
    stats.recording = False
    for writer in writers:
        writer.close()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    result = {
        "delays_ms": stats.delays_ms,
        "arrivals": stats.arrivals,
        "events": stats.events,
        "gaps": stats.gaps,
        "failed": stats.failed,
        "connected": stats.connected,
    }
    await loop.run_in_executor(None, out_path.write_text, json.dumps(result))
    print("done", flush=True)


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])))
