"""Worker processes: claim runs from the lane queue and execute the agent loop."""
