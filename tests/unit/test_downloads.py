"""Download headers: media types from names, safe Content-Disposition, ETag matching."""

from __future__ import annotations

import pytest

from app.api.downloads import (
    ascii_filename,
    content_disposition,
    content_type,
    etag,
    etag_matches,
    guess_type,
)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("a/b/report.pdf", "application/pdf"),
        ("x.PNG", "image/png"),
        ("notes.md", "text/markdown"),
        ("data.csv.gz", "application/gzip"),
        ("backup.tar.bz2", "application/x-bzip2"),
        ("Makefile", None),
        ("dir.html/file", None),  # only the last component counts
        (".bashrc", None),
    ],
)
def test_guess_type(path: str, expected: str | None) -> None:
    assert guess_type(path) == expected


def test_text_gets_a_charset_only_when_it_is_utf8() -> None:
    assert content_type("a.txt", "é".encode()) == "text/plain; charset=utf-8"
    assert content_type("a.txt", b"\xff") == "text/plain"
    assert content_type("a.json", b"{}") == "application/json; charset=utf-8"
    assert content_type("a.png", b"\x89PNG") == "image/png"
    assert content_type("a", b"") == "application/octet-stream"


def test_disposition_is_always_an_ascii_attachment() -> None:
    assert content_disposition("dir/a b.txt") == (
        "attachment; filename=\"a b.txt\"; filename*=UTF-8''a%20b.txt"
    )
    evil = 'x"\r\nSet-Cookie: a=b;\\.html'
    header = content_disposition(evil)
    assert header.isascii() and "\r" not in header and "\n" not in header
    assert header.count('"') == 2 and "\\" not in header
    assert ascii_filename("   ") == "download" and ascii_filename("日本") == "__"


def test_etag_matching() -> None:
    tag = etag("abc")
    assert tag == '"abc"'
    assert etag_matches('"abc"', tag)
    assert etag_matches('W/"abc"', tag)  # If-None-Match compares weakly
    assert etag_matches('"x", "abc"', tag)
    assert etag_matches("*", tag)
    assert not etag_matches('"abcd"', tag)
    assert not etag_matches("", tag)
