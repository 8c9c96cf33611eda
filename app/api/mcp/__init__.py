"""The runtime as an MCP server: `/mcp` (streamable HTTP, the REST API's JWT auth and tenant
rules) with tools to run an agent and wait for its answer, and to read runs and chats back.

* `endpoint`: the ASGI app mounted at `/mcp` (stateless transport, auth in front, lifespan);
* `auth`: bearer token → `Principal`, or the JSON 401/503;
* `caller`: a tool finds its verified caller and the runtime;
* `server`: the `MCPServer` and its tools; `run_agent`: the run-and-wait tool;
* `schemas`: the tools' structured results.
"""
