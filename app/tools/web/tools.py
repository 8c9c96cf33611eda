"""The web tools: `web_fetch` (guarded fetch of one URL) and `web_search` (a search provider).

Both read their settings from `ctx.settings` when they run. `web_tools(settings)` offers
`web_search` only when a search provider key is configured.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.config import Settings
from app.tools.base import Tool, ToolContext, ToolError
from app.tools.web.fetch import FetchLimits, fetch_url
from app.tools.web.html import html_to_markdown
from app.tools.web.search import search_provider
from app.tools.web.ssrf import AddressPolicy

MAX_URL_CHARS = 8192
MAX_CHARS_LIMIT = 1_000_000
SEARCH_DEFAULT_COUNT = 5
SEARCH_MAX_COUNT = 20


class WebFetch(Tool):
    """Fetch one public http(s) URL and return it as readable text."""

    name = "web_fetch"
    description = (
        "Fetch a public http(s) URL and return its content as text: HTML pages become markdown "
        "(title, headings, lists, links), text and JSON come back as they are; images, PDFs and "
        "other binary types are refused, and so are private or internal addresses. Redirects are "
        "followed. `max_chars` caps the returned content; `truncated` says whether there was more. "
        "Any HTTP status is returned (check `status`)."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "url": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_URL_CHARS,
                "description": "Absolute http:// or https:// URL.",
            },
            "max_chars": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_CHARS_LIMIT,
                "description": "Most characters of content to return (default set by the server).",
            },
        },
        "required": ["url"],
        "additionalProperties": False,
    }
    idempotent = True  # a GET: fetching again is harmless
    group = "web"
    risk = "medium"

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """`{"url" (final), "status", "contentType", "title"?, "content", "truncated"}`."""
        settings = ctx.settings
        max_chars: int = args.get("max_chars", settings.web_fetch_max_chars)
        fetched = await fetch_url(
            args["url"].strip(),
            policy=AddressPolicy.from_settings(settings),
            limits=FetchLimits.from_settings(settings),
        )
        text = fetched.text()
        title = None
        if fetched.kind == "html":
            # Parsing a large page takes a while: keep it off the event loop.
            page = await asyncio.to_thread(html_to_markdown, text, fetched.url)
            title, text = page.title, page.markdown
        result: dict[str, Any] = {
            "url": fetched.url,
            "status": fetched.status,
            "contentType": fetched.content_type,
        }
        if title:
            result["title"] = title
        result["content"] = text[:max_chars]
        result["truncated"] = fetched.truncated or len(text) > max_chars
        return result


class WebSearch(Tool):
    """Search the web through the configured provider."""

    name = "web_search"
    description = (
        "Search the web. Returns up to `count` results (default "
        f"{SEARCH_DEFAULT_COUNT}) as title, url and snippet; use web_fetch to read a result."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": 400,
                "description": "What to search for.",
            },
            "count": {
                "type": "integer",
                "minimum": 1,
                "maximum": SEARCH_MAX_COUNT,
                "description": "Number of results.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    idempotent = True
    group = "web"
    risk = "low"

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """`{"query", "provider", "results": [{"title", "url", "snippet"}]}`."""
        provider = search_provider(ctx.settings)
        if provider is None:
            raise ToolError("web search is not configured (no search provider API key)")
        query = args["query"].strip()
        if not query:
            raise ToolError("query is empty")
        results = await provider.search(query, args.get("count", SEARCH_DEFAULT_COUNT))
        return {
            "query": query,
            "provider": provider.name,
            "results": [r.as_json() for r in results],
        }


def web_tools(settings: Settings) -> list[Tool]:
    """`web_fetch`, plus `web_search` when a search provider key is configured."""
    tools: list[Tool] = [WebFetch()]
    if search_provider(settings) is not None:
        tools.append(WebSearch())
    return tools
