"""MCP servers written with the `mcp` SDK, started by the MCP client tests."""
