"""A slow OpenAI-compatible model for the concurrency bench: every `POST …/chat/completions`
streams a plain text answer as `chat.completion.chunk` SSE frames spread over `--seconds`.

Each chunk's text starts with the wall-clock time it was written to the socket, `[t=<epoch>]`,
so whoever receives the text later (the worker stores it as `assistant.delta`, an SSE client
reads it) can tell how long it took from the model to them. It speaks just enough HTTP/1.1
(keep-alive, `Transfer-Encoding: chunked`) for the `openai` SDK's httpx client, and is a process
of its own so that its CPU is not counted as the worker's.

    python bench/concurrency/fake_model.py --port 8123 --seconds 2 --chunks 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time

_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
)


def _chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": "slow",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


def _frame(payload: dict[str, object] | str) -> bytes:
    """One SSE `data:` frame as one HTTP chunk."""
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    data = f"data: {text}\n\n".encode()
    return b"%x\r\n%b\r\n" % (len(data), data)


class SlowModel:
    """The server: answers every completion request with `chunks` text chunks over `seconds`."""

    def __init__(self, seconds: float, chunks: int) -> None:
        self.seconds = seconds
        self.chunks = chunks
        self.calls = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve requests on one connection until the client closes it."""
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if length:
                    await reader.readexactly(length)
                await self._answer(writer)
        writer.close()

    async def _answer(self, writer: asyncio.StreamWriter) -> None:
        self.calls += 1
        writer.write(_HEAD + _frame(_chunk({"role": "assistant", "content": ""})))
        interval = self.seconds / self.chunks
        began = time.monotonic()
        for i in range(self.chunks):
            # Paced against the start, not the previous sleep, so that a slow loop does not
            # stretch the answer (a late chunk then shows up as latency, as it should).
            await asyncio.sleep(max(0.0, began + (i + 1) * interval - time.monotonic()))
            text = f"[t={time.time():.6f}] word{i} "
            writer.write(_frame(_chunk({"content": text})))
            await writer.drain()
        usage = {"prompt_tokens": 20, "completion_tokens": self.chunks, "total_tokens": 20}
        writer.write(_frame(_chunk({}, finish="stop")))
        writer.write(_frame({**_chunk({}), "choices": [], "usage": usage}))
        writer.write(_frame("[DONE]") + b"0\r\n\r\n")
        await writer.drain()


async def _serve(port: int, model: SlowModel) -> None:
    server = await asyncio.start_server(model.handle, "127.0.0.1", port, backlog=4096)
    print(f"fake model listening on {port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each answer")
    parser.add_argument("--chunks", type=int, default=20, help="text chunks per answer")
    args = parser.parse_args()
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        runner = asyncio.run
    runner(_serve(args.port, SlowModel(args.seconds, args.chunks)))


if __name__ == "__main__":
    main()
