"""Search providers behind web_search: Brave, Tavily and Serper, normalised to title/url/snippet.

The provider, its API key and (for tests and proxies) its base URL come from WEB_SEARCH_PROVIDER,
WEB_SEARCH_API_KEY and WEB_SEARCH_BASE_URL. Failures become `ToolError`s that say what happened:
a rejected key (401/403), a rate limit or spent quota (429), the provider being down (5xx), an
unreachable provider or an answer that is not the expected JSON. These requests go to the
configured provider only (never to a model-chosen URL), so they do not pass the SSRF guard.
"""

from __future__ import annotations

import html
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx

from app.config import Settings
from app.tools.base import ToolError

MAX_SNIPPET_CHARS = 500
_TAG = re.compile(r"<[^>]{0,200}>")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One normalised search hit."""

    title: str
    url: str
    snippet: str

    def as_json(self) -> dict[str, str]:
        """`{"title", "url", "snippet"}`."""
        return {"title": self.title, "url": self.url, "snippet": self.snippet}


class SearchProvider(ABC):
    """A web search API: builds its request and reads its answer."""

    name: ClassVar[str]
    default_base_url: ClassVar[str]

    def __init__(
        self, api_key: str, *, base_url: str | None, timeout: float, user_agent: str
    ) -> None:
        self.api_key = api_key
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self.timeout = timeout
        self.user_agent = user_agent

    async def search(self, query: str, count: int) -> list[SearchResult]:
        """Up to `count` results for `query`."""
        async with httpx.AsyncClient(
            timeout=self.timeout,
            trust_env=False,
            follow_redirects=False,
            headers={"User-Agent": self.user_agent, "Accept": "application/json"},
        ) as client:
            try:
                response = await client.send(self.request(client, query, count))
            except httpx.TimeoutException:
                raise ToolError(f"web search timed out ({self.name})") from None
            except httpx.HTTPError as exc:
                raise ToolError(f"web search failed: could not reach {self.name}: {exc}") from None
        self._raise_for_status(response)
        try:
            data = response.json()
        except ValueError:
            raise ToolError(f"web search failed: {self.name} did not answer JSON") from None
        results = self.parse(data) if isinstance(data, dict) else []
        return results[:count]

    @abstractmethod
    def request(self, client: httpx.AsyncClient, query: str, count: int) -> httpx.Request:
        """The provider's search request."""

    @abstractmethod
    def parse(self, data: dict[str, Any]) -> list[SearchResult]:
        """The results in the provider's JSON answer."""

    def _raise_for_status(self, response: httpx.Response) -> None:
        status = response.status_code
        if 200 <= status < 300:
            return
        if status in (401, 403):
            problem = f"{self.name} rejected the API key (HTTP {status})"
        elif status == 429:
            problem = f"{self.name} rate limit or quota exceeded (HTTP 429); try again later"
        elif status >= 500:
            problem = f"{self.name} is unavailable (HTTP {status}); try again later"
        else:
            detail = _SPACES.sub(" ", response.text[:200]).strip()
            problem = f"{self.name} answered HTTP {status}" + (f": {detail}" if detail else "")
        raise ToolError(f"web search failed: {problem}")


class BraveSearch(SearchProvider):
    """Brave Search API: `GET /res/v1/web/search?q&count`, key in `X-Subscription-Token`."""

    name = "brave"
    default_base_url = "https://api.search.brave.com"

    def request(self, client: httpx.AsyncClient, query: str, count: int) -> httpx.Request:
        """GET with the query string."""
        return client.build_request(
            "GET",
            f"{self.base_url}/res/v1/web/search",
            params={"q": query, "count": count},
            headers={"X-Subscription-Token": self.api_key},
        )

    def parse(self, data: dict[str, Any]) -> list[SearchResult]:
        """`web.results[]`: title, url, description."""
        web = data.get("web")
        items = web.get("results") if isinstance(web, dict) else None
        return _normalise(items, url_key="url", snippet_key="description")


class TavilySearch(SearchProvider):
    """Tavily: `POST /search` with a JSON body, key as a bearer token."""

    name = "tavily"
    default_base_url = "https://api.tavily.com"

    def request(self, client: httpx.AsyncClient, query: str, count: int) -> httpx.Request:
        """POST `{query, max_results, search_depth}`."""
        return client.build_request(
            "POST",
            f"{self.base_url}/search",
            json={"query": query, "max_results": count, "search_depth": "basic"},
            headers={"Authorization": f"Bearer {self.api_key}"},
        )

    def parse(self, data: dict[str, Any]) -> list[SearchResult]:
        """`results[]`: title, url, content."""
        return _normalise(data.get("results"), url_key="url", snippet_key="content")


class SerperSearch(SearchProvider):
    """Serper (Google results): `POST /search` with a JSON body, key in `X-API-KEY`."""

    name = "serper"
    default_base_url = "https://google.serper.dev"

    def request(self, client: httpx.AsyncClient, query: str, count: int) -> httpx.Request:
        """POST `{q, num}`."""
        return client.build_request(
            "POST",
            f"{self.base_url}/search",
            json={"q": query, "num": count},
            headers={"X-API-KEY": self.api_key},
        )

    def parse(self, data: dict[str, Any]) -> list[SearchResult]:
        """`organic[]`: title, link, snippet."""
        return _normalise(data.get("organic"), url_key="link", snippet_key="snippet")


PROVIDERS: dict[str, type[SearchProvider]] = {
    p.name: p for p in (BraveSearch, TavilySearch, SerperSearch)
}


def search_provider(settings: Settings) -> SearchProvider | None:
    """The configured provider, or None when no API key is set."""
    key = settings.web_search_api_key.get_secret_value() if settings.web_search_api_key else ""
    if not key.strip():
        return None
    return PROVIDERS[settings.web_search_provider](
        key.strip(),
        base_url=settings.web_search_base_url,
        timeout=settings.web_fetch_timeout_seconds,
        user_agent=settings.web_user_agent,
    )


def _normalise(items: Any, *, url_key: str, snippet_key: str) -> list[SearchResult]:
    """Results with a URL, their title and snippet as plain text (tags and entities removed)."""
    if not isinstance(items, list):
        return []
    results = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(url := item.get(url_key), str) or not url:
            continue
        snippet = _plain(item.get(snippet_key))
        if len(snippet) > MAX_SNIPPET_CHARS:
            snippet = snippet[: MAX_SNIPPET_CHARS - 1].rstrip() + "…"
        results.append(
            SearchResult(title=_plain(item.get("title")) or url, url=url, snippet=snippet)
        )
    return results


def _plain(value: Any) -> str:
    if not isinstance(value, str):
        return ""
    return _SPACES.sub(" ", html.unescape(_TAG.sub("", value))).strip()
