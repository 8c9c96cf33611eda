"""`agent-runtime worker` under cProfile, timed by CPU (not wall) time.

The stock `python -m cProfile` times by the wall clock: with a thousand runs awaiting the
database and the model, that charges the waits to whatever coroutine is suspended. Timed by
`time.process_time`, the profile says where the worker's CPU goes.

    python bench/concurrency/profile_worker.py OUT.prof     # then: pstats OUT.prof
"""

from __future__ import annotations

import cProfile
import sys
import time

from app.cli import main


def run(out: str) -> None:
    """Run the worker command until it stops, then write the profile to `out`."""
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    try:
        main(["worker"])
    finally:
        profiler.disable()
        profiler.dump_stats(out)


if __name__ == "__main__":
    run(sys.argv[1])
