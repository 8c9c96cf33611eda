"""The lane queue: runs of one session run one at a time, in order; sessions run in parallel."""
