"""MCP servers as tool sources: tenants attach servers, runs get their tools (`source.py`)."""
