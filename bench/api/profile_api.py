"""Run `python -m app.cli api` under cProfile with CPU time as the clock; on exit (SIGTERM) write
the stats to the path given (read them with `python -m pstats PATH`). Used by `post.py --profile`.
"""

from __future__ import annotations

import cProfile
import sys
import time

from app.cli.parser import main

if __name__ == "__main__":
    profiler = cProfile.Profile(time.process_time)
    try:
        profiler.runcall(main, ["api"])
    finally:
        profiler.dump_stats(sys.argv[1])
