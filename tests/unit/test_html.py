"""HTML → readable markdown, and bytes → text (charsets, content kinds) for web_fetch."""

from __future__ import annotations

import pytest

from app.tools.web.fetch import Fetched, content_kind
from app.tools.web.html import html_to_markdown

BASE = "https://example.com/docs/page.html"

ARTICLE = """<!doctype html>
<html><head>
  <title>  The   Title </title>
  <style>body { color: red }</style>
  <script>var leaked = "SCRIPT-TEXT";</script>
  <meta name="description" content="META-TEXT">
</head><body>
  <nav><a href="/">NAV-LINK</a></nav>
  <main>
    <h1>Heading One</h1>
    <p>Some <b>bold</b> and <em>emphasis</em>, a <a href="other.html" title="tip">relative link</a>,
       an <a href="https://other.org/x">absolute one</a>, <a href="javascript:alert(1)">a script
       link</a> and <a href="#section">a fragment</a>. snake_case stays; so does 2*3*4.</p>
    <h2>Heading Two</h2>
    <ul><li>first</li><li>second <code>x()</code></li></ul>
    <ol><li>one</li><li>two</li></ol>
    <pre><code>def f():
    return 1</code></pre>
    <blockquote>quoted</blockquote>
    <table><tr><th>k</th><th>v</th></tr><tr><td>a</td><td>1</td></tr></table>
    <img src="/cat.png" alt="A cat"><img src="/spacer.gif">
    <img src="data:image/png;base64,AAAA" alt="inline data">
    <div hidden>HIDDEN-ATTR</div><span aria-hidden="true">HIDDEN-ARIA</span>
    <p style="display: none">HIDDEN-STYLE</p>
    <noscript>NOSCRIPT-TEXT</noscript><template>TEMPLATE-TEXT</template>
    <form><input value="INPUT-VALUE"><button>BUTTON-TEXT</button><label>A label</label></form>
    <!-- COMMENT-TEXT -->
    <p>Caf&eacute; &amp; cr&egrave;me &lt;tag&gt;</p>
  </main>
  <footer>FOOTER-TEXT</footer>
</body></html>"""


@pytest.fixture(scope="module")
def converted() -> tuple[str | None, str]:
    page = html_to_markdown(ARTICLE, BASE)
    return page.title, page.markdown


def test_title(converted: tuple[str | None, str]) -> None:
    assert converted[0] == "The Title"


def test_structure_is_markdown(converted: tuple[str | None, str]) -> None:
    text = converted[1]
    assert text.startswith("# Heading One")
    assert "\n## Heading Two\n" in text
    assert "**bold**" in text and "*emphasis*" in text
    assert "- first\n- second `x()`" in text
    assert "1. one\n2. two" in text
    assert "```\ndef f():\n    return 1\n```" in text
    assert "> quoted" in text
    assert "| k | v |" in text and "| a | 1 |" in text
    assert "snake_case stays; so does 2*3*4." in text
    assert "Café & crème <tag>" in text
    assert "\n\n\n" not in text


def test_links_are_absolute_and_followable(converted: tuple[str | None, str]) -> None:
    text = converted[1]
    assert "[relative link](https://example.com/docs/other.html)" in text
    assert "[absolute one](https://other.org/x)" in text
    assert "javascript:" not in text
    assert "a script" in text  # the text stays, the link goes
    assert "#section" not in text and "a fragment" in text
    assert '"tip"' not in text


def test_images_only_with_alt_text(converted: tuple[str | None, str]) -> None:
    text = converted[1]
    assert "![A cat](https://example.com/cat.png)" in text
    assert "spacer" not in text
    assert "data:" not in text and "inline data" in text


def test_noise_is_dropped(converted: tuple[str | None, str]) -> None:
    text = converted[1]
    for noise in (
        "SCRIPT-TEXT",
        "color: red",
        "META-TEXT",
        "HIDDEN-ATTR",
        "HIDDEN-ARIA",
        "HIDDEN-STYLE",
        "NOSCRIPT-TEXT",
        "TEMPLATE-TEXT",
        "INPUT-VALUE",
        "BUTTON-TEXT",
        "COMMENT-TEXT",
    ):
        assert noise not in text, noise
    assert "A label" in text


def test_main_content_is_preferred(converted: tuple[str | None, str]) -> None:
    assert "NAV-LINK" not in converted[1] and "FOOTER-TEXT" not in converted[1]


def test_without_main_the_body_is_used() -> None:
    page = html_to_markdown(
        "<html><body><nav><a href='/a'>Menu</a></nav><p>Body text</p></body></html>", BASE
    )
    assert page.title is None
    assert page.markdown == "[Menu](https://example.com/a)\n\nBody text"


def test_lone_article_is_the_main_content() -> None:
    page = html_to_markdown(
        "<body><div>Sidebar</div><article><h1>Post</h1><p>Words</p></article></body>", BASE
    )
    assert page.title == "Post"  # no <title>: the first <h1>
    assert page.markdown == "# Post\n\nWords"


def test_empty_main_falls_back_to_body() -> None:
    page = html_to_markdown("<body><main> </main><p>Real content</p></body>", BASE)
    assert page.markdown == "Real content"


def test_base_href_is_honoured() -> None:
    page = html_to_markdown(
        '<head><base href="https://cdn.example.net/root/"></head><p><a href="x">x link</a></p>',
        BASE,
    )
    assert "[x link](https://cdn.example.net/root/x)" in page.markdown


def test_fragments_and_plain_text_documents() -> None:
    assert html_to_markdown("just text", BASE).markdown == "just text"
    assert html_to_markdown("", BASE) == html_to_markdown("<html></html>", BASE)
    assert html_to_markdown("<p>unclosed <b>bold", BASE).markdown == "unclosed **bold**"


def test_absurd_nesting_does_not_crash() -> None:
    deep = "<div>" * 5000 + "deep text" + "</div>" * 5000
    assert "deep text" in html_to_markdown(f"<body>{deep}</body>", BASE).markdown


def fetched(
    body: bytes, *, charset: str | None = None, kind: str = "text", cut: bool = False
) -> Fetched:
    return Fetched(
        url=BASE,
        status=200,
        content_type="text/plain",
        kind=kind,  # type: ignore[arg-type]
        charset=charset,
        body=body,
        truncated=cut,
    )


def test_text_uses_the_declared_charset() -> None:
    assert fetched("café".encode("latin-1"), charset="iso-8859-1").text() == "café"
    assert fetched("café".encode()).text() == "café"
    assert fetched("café".encode(), charset="no-such-charset").text() == "café"


def test_text_uses_bom_then_meta_charset() -> None:
    assert fetched(b"\xef\xbb\xbfhi").text() == "hi"
    assert fetched("hé".encode("utf-16")).text() == "hé"
    html = '<html><head><meta charset="windows-1252"></head><body>caf\xe9</body>'
    assert "café" in fetched(html.encode("latin-1"), kind="html").text()


def test_truncated_text_drops_a_partial_character() -> None:
    assert fetched("aé".encode()[:2], cut=True).text() == "a"
    assert fetched("aé".encode()[:2]).text() == "a\ufffd"


@pytest.mark.parametrize(
    ("mime", "kind"),
    [
        ("text/html", "html"),
        ("application/xhtml+xml", "html"),
        ("text/plain", "text"),
        ("text/markdown", "text"),
        ("text/csv", "text"),
        ("application/json", "text"),
        ("application/ld+json", "text"),
        ("application/rss+xml", "text"),
        ("application/javascript", "text"),
        ("", "unknown"),
        ("application/octet-stream", "unknown"),
        ("image/png", "binary"),
        ("application/pdf", "binary"),
        ("application/zip", "binary"),
        ("video/mp4", "binary"),
    ],
)
def test_content_kinds(mime: str, kind: str) -> None:
    assert content_kind(mime) == kind
