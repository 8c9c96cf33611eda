"""The HTTP API: FastAPI app, routes, JSON errors and the SSE event hub."""
