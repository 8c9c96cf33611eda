"""Run `python -m app.cli ARGS…` under cProfile measuring CPU time (not wall time: on a shared
machine wall time charges whatever was running when the process was descheduled), writing the
stats to the file named first: `python bench/queue/profiled.py OUT worker`."""

from __future__ import annotations

import cProfile
import sys
import time

from app.cli.parser import main

if __name__ == "__main__":
    out, args = sys.argv[1], sys.argv[2:]
    profile = cProfile.Profile(time.process_time)
    profile.enable()
    try:
        main(args)
    except SystemExit:
        pass
    finally:
        profile.disable()
        profile.dump_stats(out)
