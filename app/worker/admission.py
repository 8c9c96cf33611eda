"""Admission: whether a worker with free slots should claim another run now.

`WORKER_CONCURRENCY` caps the runs a worker holds, but what one worker can serve depends on what
its runs do: a thousand runs waiting on slow models cost little, a hundred streaming fast ones
can saturate its CPU or its connection pool. Past that point another run adds no throughput,
only latency to every run it holds (each event waits longer for the loop and for a connection),
and writes that wait longer than the pool's timeout hand their runs back to be redone. So a
worker claims only while it is keeping up:

* its event loop runs on time (a probe sleeping `LAG_PROBE_SECONDS` wakes less than
  `SATURATED_LAG_SECONDS` late; a late wake-up counts, halving, for the next few probes), and
* its runs' pool has a connection free (a run uses one only while it writes).

Held back, the claim loop looks again after `RETRY_SECONDS` (or when a run finishes); runs it
does not claim stay queued for this worker or another.
"""

from __future__ import annotations

import asyncio

from app.db.engine import Database

LAG_PROBE_SECONDS = 0.05
SATURATED_LAG_SECONDS = 0.1
RETRY_SECONDS = 0.05


class Admission:
    """Tracks the worker's event-loop lag and its runs' pool, and says when to stop claiming."""

    def __init__(self, db: Database, *, max_lag: float = SATURATED_LAG_SECONDS) -> None:
        self._db = db
        self._max_lag = max_lag
        self.lag = 0.0
        """How late the probes wake (seconds): the last one's delay, or half the previous value
        if that is more."""

    async def watch(self) -> None:
        """Measure the loop's lag until cancelled (a side task of the worker)."""
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            await asyncio.sleep(LAG_PROBE_SECONDS)
            late = max(0.0, loop.time() - began - LAG_PROBE_SECONDS)
            # A spike decays over a few probes rather than vanishing at the next one.
            self.lag = max(late, self.lag / 2)

    def saturated(self) -> bool:
        """Whether the loop runs late or every pooled connection is in use."""
        if self.lag > self._max_lag:
            return True
        return self._db.connections_in_use() >= self._db.max_connections
