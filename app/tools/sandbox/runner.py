"""Run one sandbox process: wall-clock timeout, whole-tree kill, stdout/stderr kept within a cap.

The process starts in a session of its own (`start_new_session`, done by the spawn code itself,
not a `preexec_fn`, which is unsafe in a process with threads). Under bubblewrap, bwrap reports
its init's pid on `--info-fd`; to stop the sandbox that init is killed through a pidfd, which
makes the kernel kill every process of the pid namespace (also those that called `setsid`), and
the call returns only once the init is gone. Without bubblewrap the process group is killed, on
timeout, on cancellation and after a normal exit (background jobs left behind).

Output is drained while the process runs (so it never blocks on a full pipe) and only the first
and last `max_chars / 2` characters are kept, joined by a visible `…[truncated N chars]…`.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from app.tools.sandbox.isolation import Invocation

log = structlog.get_logger(__name__)

READ_CHUNK = 64 * 1024
SETTLE_SECONDS = 5.0
"""After the kill: how long to wait for the process to be reaped and the pipes to close."""


class CappedText:
    """The head and tail of a byte stream decoded as UTF-8, at most `max_chars` characters."""

    def __init__(self, max_chars: int) -> None:
        self._tail_max = max_chars // 2
        self._head_max = max_chars - self._tail_max
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head: list[str] = []
        self._head_len = 0
        self._tail = ""
        self.total_chars = 0

    def feed(self, data: bytes, *, final: bool = False) -> None:
        """Add the next bytes of the stream (`final` flushes an incomplete UTF-8 sequence)."""
        text = self._decoder.decode(data, final)
        self.total_chars += len(text)
        room = self._head_max - self._head_len
        if room > 0:
            self._head.append(text[:room])
            self._head_len += len(text[:room])
            text = text[room:]
        if text and self._tail_max:
            self._tail = (self._tail + text)[-self._tail_max :]

    @property
    def dropped_chars(self) -> int:
        """Characters seen but not kept."""
        return self.total_chars - self._head_len - len(self._tail)

    @property
    def truncated(self) -> bool:
        """Whether anything was dropped."""
        return self.dropped_chars > 0

    def text(self) -> str:
        """What was kept; a marker says where and how much was cut. NUL shows as U+FFFD (the
        result is stored as JSONB, which refuses `\\u0000`)."""
        head, tail = "".join(self._head).replace("\0", "\ufffd"), self._tail.replace("\0", "\ufffd")
        if not self.truncated:
            return head + tail
        return f"{head}\n…[truncated {self.dropped_chars} chars]…\n{tail}"


@dataclass(frozen=True, slots=True)
class ProcessResult:
    """How a sandbox process ended, and what it printed."""

    exit_code: int | None
    """Exit status (bwrap reports 128+N for code killed by signal N; -N: bwrap itself killed)."""
    timed_out: bool
    duration_seconds: float
    stdout: CappedText
    stderr: CappedText


async def _drain(stream: asyncio.StreamReader | None, sink: CappedText) -> None:
    if stream is None:
        return
    while chunk := await stream.read(READ_CHUNK):
        sink.feed(chunk)
    sink.feed(b"", final=True)


def kill_group(pgid: int) -> None:
    """SIGKILL process group `pgid` (gone already: fine)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def run_process(
    build: Callable[[int], Invocation], *, timeout_seconds: float, max_chars: int
) -> ProcessResult:
    """Run `build(info_fd)` with stdin closed until it exits or `timeout_seconds` pass.

    Then (also on cancellation) everything it started is killed before this returns; see
    `_stop`. Under bubblewrap no sandboxed process, not even a zombie, outlives the call.
    """
    started = time.monotonic()
    info_read, info_write = os.pipe()
    try:
        inv = build(info_write)
        proc = await asyncio.create_subprocess_exec(
            *inv.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=inv.env,
            cwd=inv.cwd,
            start_new_session=True,
            pass_fds=(info_write,) if inv.info_fd is not None else (),
        )
    except BaseException:
        os.close(info_read)
        raise
    finally:
        os.close(info_write)
    sandbox_init = asyncio.create_task(asyncio.to_thread(_open_init, info_read))
    stdout, stderr = CappedText(max_chars), CappedText(max_chars)
    readers = [
        asyncio.create_task(_drain(proc.stdout, stdout)),
        asyncio.create_task(_drain(proc.stderr, stderr)),
    ]
    timed_out = False
    try:
        async with asyncio.timeout(timeout_seconds):
            await proc.wait()
    except TimeoutError:
        timed_out = True
    finally:
        pidfd = await _init_pidfd(sandbox_init)
        try:
            await _stop(proc, pidfd)
            await _settle(proc, pidfd, readers)
        finally:
            if pidfd is not None:
                os.close(pidfd)
    return ProcessResult(
        exit_code=proc.returncode,
        timed_out=timed_out,
        duration_seconds=time.monotonic() - started,
        stdout=stdout,
        stderr=stderr,
    )


def _open_init(info_read: int) -> int | None:
    """A pidfd of the sandbox's init, from bwrap's `--info-fd` JSON (None: none, or gone)."""
    with os.fdopen(info_read, "rb") as f:
        data = f.read()  # bwrap closes its end right after writing; EOF also when it dies
    try:
        pid = int(json.loads(data)["child-pid"])
        return os.pidfd_open(pid)
    except (ValueError, KeyError, TypeError, OSError):
        return None


async def _init_pidfd(sandbox_init: asyncio.Task[int | None]) -> int | None:
    """The sandbox init's pidfd once bwrap reported it (bounded wait; None if it never did)."""
    try:
        async with asyncio.timeout(SETTLE_SECONDS):
            return await asyncio.shield(sandbox_init)
    except TimeoutError:
        # Still waiting on a hung bwrap: close the pidfd whenever it arrives.
        sandbox_init.add_done_callback(_close_late_pidfd)
        return None


def _close_late_pidfd(task: asyncio.Task[int | None]) -> None:
    if not task.cancelled() and task.exception() is None and (fd := task.result()) is not None:
        os.close(fd)


async def _stop(proc: asyncio.subprocess.Process, pidfd: int | None) -> None:
    """Kill what is still running.

    Under bubblewrap the sandbox's init is killed first, through its pidfd: the kernel then kills
    every process of its pid namespace (also those that called `setsid`), and bwrap, still
    alive, reaps the init and exits — killing bwrap too would leave the init to be reaped by
    whatever the host's pid 1 is. Otherwise, or if that did not end it, the process group goes.
    After any exit the group is killed once more for leftovers (unsafe mode: background jobs);
    while one lives the group id cannot have been reused.
    """
    if proc.returncode is None:
        if pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        else:
            kill_group(proc.pid)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(SETTLE_SECONDS):
                await proc.wait()
    kill_group(proc.pid)


async def _exited(pidfd: int) -> None:
    """Wait until the process behind `pidfd` has exited (a pidfd polls readable then)."""
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not gone.done():
            gone.set_result(None)

    loop.add_reader(pidfd, readable)
    try:
        await gone
    finally:
        loop.remove_reader(pidfd)


async def _settle(
    proc: asyncio.subprocess.Process, pidfd: int | None, readers: list[asyncio.Task[None]]
) -> None:
    """Reap the process, outwait the sandbox's init, let the readers reach EOF (all bounded)."""
    try:
        async with asyncio.timeout(SETTLE_SECONDS):
            await proc.wait()
            if pidfd is not None:
                await _exited(pidfd)
            await asyncio.gather(*readers, return_exceptions=True)
    except TimeoutError:
        log.warning("sandbox did not settle after the kill", pid=proc.pid)
    finally:
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
