"""Web tools: `web_fetch` (SSRF-guarded fetch, HTML to markdown) and `web_search` (providers).

Modules: `ssrf` (address policy, resolution, the connect-time guard), `fetch` (the guarded
fetcher), `html` (HTML to readable markdown), `search` (Brave, Tavily, Serper), `tools` (the
`Tool`s and `web_tools(settings)`).
"""

from app.tools.web.tools import WebFetch, WebSearch, web_tools

__all__ = ["WebFetch", "WebSearch", "web_tools"]
