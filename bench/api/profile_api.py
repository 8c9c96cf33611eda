"""Run `python -m app.cli api` under cProfile with CPU time as the clock, from its first SIGUSR1
on (so start-up is left out; without the signal nothing is profiled); on exit (SIGTERM) write the
stats to the path given (read them with `python -m pstats PATH`). Used by `post.py --profile`,
which signals it right before its timed posts.
"""

from __future__ import annotations

import cProfile
import signal
import sys
import time
from types import FrameType

from app.cli.parser import main

if __name__ == "__main__":
    profiler = cProfile.Profile(time.process_time)

    def _enable(signum: int, frame: FrameType | None) -> None:
        profiler.enable()  # the signal is handled in the main thread: the event loop's

    signal.signal(signal.SIGUSR1, _enable)
    try:
        main(["api"])
    finally:
        profiler.disable()
        profiler.dump_stats(sys.argv[1])
