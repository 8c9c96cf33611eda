"""HTML → readable markdown for web_fetch (BeautifulSoup to clean up, markdownify to render).

What the model gets: the page title, and the main content (`<main>`, `role="main"` or a lone
`<article>`, else `<body>`) as markdown - ATX headings, lists, tables, fenced code, links as
`[text](absolute url)`, images as `![alt](url)` when they have alt text. Dropped: scripts, styles,
templates, embedded objects, form controls, hidden elements (`hidden`, `aria-hidden="true"`,
inline `display:none`), comments, `javascript:`/`data:` links and same-page `#fragment` links.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from bs4 import BeautifulSoup, Tag
from markdownify import ATX, MarkdownConverter

DROPPED_TAGS = (
    "script",
    "style",
    "noscript",
    "template",
    "svg",
    "canvas",
    "iframe",
    "frame",
    "object",
    "embed",
    "applet",
    "head",
    "link",
    "meta",
    "button",
    "input",
    "select",
    "option",
    "textarea",
    "dialog",
)
_LINK_SCHEMES = ("http", "https", "mailto")
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)
_TRAILING_SPACE = re.compile(r"[ \t]+\n")
_BLANK_LINES = re.compile(r"\n{3,}")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Page:
    """A converted HTML document."""

    title: str | None
    markdown: str


class _Converter(MarkdownConverter):
    """markdownify with images rendered only when they say what they show."""

    def convert_img(self, el: Tag, text: str, parent_tags: set[str]) -> str:
        """`![alt](src)`; just the alt text inside inline contexts; nothing without alt text."""
        alt = _SPACES.sub(" ", str(el.get("alt") or "")).strip()
        src = str(el.get("src") or "")
        if not alt:
            return ""
        if not src or "_inline" in parent_tags:
            return alt
        return f"![{alt}]({src})"


_CONVERTER = _Converter(
    heading_style=ATX,
    bullets="-",
    escape_asterisks=False,
    escape_underscores=False,
    escape_misc=False,
)


def html_to_markdown(html: str, base_url: str) -> Page:
    """Convert an HTML document fetched from `base_url` into a title and readable markdown."""
    soup = BeautifulSoup(html, "html.parser")
    title = _title(soup)
    base = _base_url(soup, base_url)
    for tag in soup.find_all(DROPPED_TAGS):
        tag.decompose()
    for tag in soup.find_all(_is_hidden):
        if not tag.decomposed:
            tag.decompose()
    _absolutize(soup, base)
    root = _main_content(soup)
    try:
        markdown = _CONVERTER.convert_soup(root)
    except RecursionError:  # absurdly deep nesting: fall back to plain text
        markdown = root.get_text("\n")
    return Page(title=title, markdown=tidy(markdown))


def tidy(text: str) -> str:
    """Drop trailing spaces and runs of blank lines."""
    text = _TRAILING_SPACE.sub("\n", text.replace("\r\n", "\n"))
    return _BLANK_LINES.sub("\n\n", text).strip()


def _title(soup: BeautifulSoup) -> str | None:
    for tag in (soup.title, soup.find("h1")):
        if isinstance(tag, Tag):
            text = _SPACES.sub(" ", tag.get_text()).strip()
            if text:
                return text
    return None


def _base_url(soup: BeautifulSoup, page_url: str) -> str:
    base = soup.find("base", href=True)
    if isinstance(base, Tag):
        return urljoin(page_url, str(base["href"]))
    return page_url


def _is_hidden(tag: Tag) -> bool:
    if tag.has_attr("hidden") or str(tag.get("aria-hidden", "")).lower() == "true":
        return True
    return bool(_HIDDEN_STYLE.search(str(tag.get("style", ""))))


def _absolutize(soup: BeautifulSoup, base: str) -> None:
    """Make link and image URLs absolute; drop the ones a reader cannot follow."""
    page = base.split("#", 1)[0]
    for tag in soup.find_all(["a", "img"]):
        attr = "href" if tag.name == "a" else "src"
        for noise in ("title", "srcset"):
            if tag.has_attr(noise):
                del tag[noise]
        raw = tag.get(attr)
        if raw is None:
            continue
        target = urljoin(base, str(raw).strip())
        same_page = target.split("#", 1)[0] == page and "#" in target
        if urlsplit(target).scheme not in _LINK_SCHEMES or same_page:
            del tag[attr]
        else:
            tag[attr] = target


def _main_content(soup: BeautifulSoup) -> Tag:
    """`<main>`, `role="main"` or a lone `<article>` when it has text; else `<body>` (or all)."""
    articles = soup.find_all("article")
    candidates = [soup.find("main"), soup.find(True, attrs={"role": "main"})]
    if len(articles) == 1:
        candidates.append(articles[0])
    for candidate in candidates:
        if isinstance(candidate, Tag) and candidate.get_text(strip=True):
            return candidate
    body = soup.body
    return body if isinstance(body, Tag) else soup
