"""Safe headers for serving stored files (model-written or uploaded) back to browsers.

Whatever a file holds or is called, the response cannot run in our origin or smuggle headers:

* `Content-Type` is guessed from the name alone, from Python's built-in table (the same on every
  host: `/etc/mime.types` is not read), else `application/octet-stream`. A compressed name
  (`x.tar.gz`) is served as the archive type, never with `Content-Encoding` (the browser would
  unpack it). Text types get `charset=utf-8` when the bytes are UTF-8.
* `Content-Disposition` is always `attachment`: a browser saves the file instead of rendering
  it, so model-written HTML or SVG never runs on the API's origin. The name is the path's last
  component, as a quoted ASCII fallback (anything outside a small safe set becomes `_`) plus
  RFC 5987 `filename*` (percent-encoded UTF-8): neither can carry a quote, `;` or line break.
* `X-Content-Type-Options: nosniff`, and a CSP that forbids everything (`sandbox`) should a
  browser render it anyway.
"""

from __future__ import annotations

import mimetypes
import string
from urllib.parse import quote

OCTET_STREAM = "application/octet-stream"

_TYPES = mimetypes.MimeTypes()  # the built-in table only (no filenames: no system files)
_TYPES.add_type("text/javascript", ".js")  # RFC 9239 (Python < 3.12 says application/…)
_TYPES.add_type("text/javascript", ".mjs")
_TYPES.add_type("application/xhtml+xml", ".xhtml")
_TYPES.add_type("text/markdown", ".md")
_TYPES.add_type("text/markdown", ".markdown")
_TYPES.add_type("text/x-yaml", ".yaml")
_TYPES.add_type("text/x-yaml", ".yml")
_TYPES.add_type("application/toml", ".toml")
_TYPES.add_type("text/x-log", ".log")
_TYPES.add_type("application/x-ndjson", ".jsonl")
_TYPES.add_type("application/x-ndjson", ".ndjson")

# What a compressed name (`data.csv.gz`) is served as: the compressed file, not its content.
_COMPRESSED = {
    "gzip": "application/gzip",
    "bzip2": "application/x-bzip2",
    "xz": "application/x-xz",
    "compress": "application/x-compress",
    "br": "application/x-brotli",
}

# Types that are text for the charset parameter (besides text/*).
_TEXTUAL = {
    "application/json",
    "application/x-ndjson",
    "application/xml",
    "application/toml",
    "application/javascript",
    "application/xhtml+xml",
    "image/svg+xml",
}

_FALLBACK_SAFE = frozenset(string.ascii_letters + string.digits + " .-_+()[]~!#$&=@^{}")
_ATTR_CHARS = "!#$&+-.^_`|~"  # RFC 5987 attr-char, besides letters and digits

DOWNLOAD_CSP = "default-src 'none'; sandbox"


def guess_type(path: str) -> str | None:
    """The media type a file name stands for, or None when the name says nothing."""
    media, encoding = _TYPES.guess_type(path.rsplit("/", 1)[-1], strict=False)
    if encoding is not None:
        return _COMPRESSED.get(encoding)
    return media


def content_type(path: str, content: bytes) -> str:
    """The `Content-Type` to serve `content` stored at `path` with."""
    media = guess_type(path) or OCTET_STREAM
    if media.startswith("text/") or media in _TEXTUAL:
        try:
            content.decode("utf-8")
        except UnicodeDecodeError:
            return media
        return f"{media}; charset=utf-8"
    return media


def ascii_filename(name: str) -> str:
    """`name` reduced to characters that are safe inside a quoted `filename=` (others → `_`)."""
    safe = "".join(ch if ch in _FALLBACK_SAFE else "_" for ch in name).strip(" ")
    return safe or "download"


def content_disposition(path: str) -> str:
    """`attachment` with the path's last component as the file name (RFC 6266)."""
    name = path.rsplit("/", 1)[-1] or "download"
    return (
        f"attachment; filename=\"{ascii_filename(name)}\"; filename*=UTF-8''"
        f"{quote(name, safe=_ATTR_CHARS)}"
    )


def etag(sha256: str) -> str:
    """A strong entity tag for content with this SHA-256."""
    return f'"{sha256}"'


def etag_matches(if_none_match: str, current: str) -> bool:
    """Whether an `If-None-Match` header matches entity tag `current` (weak comparison)."""
    if if_none_match.strip() == "*":
        return True
    wanted = current.removeprefix("W/")
    return any(
        tag.strip().removeprefix("W/") == wanted for tag in if_none_match.split(",") if tag.strip()
    )
