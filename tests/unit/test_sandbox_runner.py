"""The process runner: capped output, exit codes, and timeouts/cancellation that kill the tree."""

from __future__ import annotations

import asyncio
import os

import pytest

from app.tools.sandbox.isolation import Invocation
from app.tools.sandbox.runner import CappedText, run_process

# Never beside another test (`make test` runs these after the parallel part): they count the
# sandbox user's processes, which another test's sandbox would add to.
pytestmark = pytest.mark.serial

ENV = {"PATH": "/usr/bin:/bin"}


def shell(script: str) -> Invocation:
    return Invocation(["/bin/sh", "-c", script], ENV, "/")


def running(marker: str) -> list[int]:
    """Pids whose command line contains `marker`."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read().replace(b"\0", b" "):
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


async def gone(marker: str) -> bool:
    """Whether no process matches `marker` within 3 s (SIGKILL is delivered asynchronously, and
    without a pid namespace an orphan's corpse waits for the host's init to reap it)."""
    for _ in range(30):
        if not running(marker):
            return True
        await asyncio.sleep(0.1)
    return False


def test_capped_text_keeps_everything_under_the_cap() -> None:
    text = CappedText(10)
    text.feed(b"hello")
    text.feed(b"", final=True)
    assert (text.text(), text.truncated) == ("hello", False)


def test_capped_text_keeps_head_and_tail_with_a_visible_marker() -> None:
    text = CappedText(10)
    for chunk in (b"0123", b"456789abc", b"defghij"):
        text.feed(chunk)
    assert text.truncated and text.dropped_chars == 10
    assert text.text() == "01234\n…[truncated 10 chars]…\nfghij"


def test_capped_text_decodes_utf8_split_across_chunks() -> None:
    text = CappedText(100)
    data = "é€".encode()
    for i in range(len(data)):
        text.feed(data[i : i + 1])
    text.feed(b"\xff\0", final=True)
    assert text.text() == "é€\ufffd\ufffd"  # undecodable bytes and NUL (JSONB refuses it)


async def test_exit_code_and_both_streams() -> None:
    result = await run_process(
        lambda fd: shell("echo out; echo err >&2; exit 3"), timeout_seconds=10, max_chars=100
    )
    assert (result.exit_code, result.timed_out) == (3, False)
    assert (result.stdout.text(), result.stderr.text()) == ("out\n", "err\n")


async def test_large_output_is_drained_and_truncated() -> None:
    result = await run_process(
        lambda fd: shell("head -c 5000000 /dev/zero | tr '\\0' x; echo done"),
        timeout_seconds=30,
        max_chars=1000,
    )
    assert result.exit_code == 0 and result.stdout.total_chars == 5_000_005
    assert result.stdout.text().endswith("xxxdone\n") and "[truncated 4999005 chars]" in (
        result.stdout.text()
    )


async def test_timeout_kills_the_process_group() -> None:
    result = await run_process(
        lambda fd: shell("sleep 971 & sleep 971 & echo up; sleep 971"),
        timeout_seconds=1,
        max_chars=100,
    )
    assert result.timed_out and result.stdout.text() == "up\n"
    assert result.duration_seconds < 5
    assert await gone("sleep 971")


async def test_background_jobs_do_not_outlive_a_normal_exit() -> None:
    result = await run_process(
        lambda fd: shell("sleep 972 >/dev/null 2>&1 & echo bye"), timeout_seconds=10, max_chars=100
    )
    assert result.exit_code == 0 and not result.timed_out
    assert await gone("sleep 972")


async def test_cancellation_kills_the_process_group() -> None:
    task = asyncio.create_task(
        run_process(lambda fd: shell("sleep 973 & sleep 973"), timeout_seconds=60, max_chars=100)
    )
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone("sleep 973")
