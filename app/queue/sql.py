"""Named SQL statements of the run queue, loaded from `queries.sql` (split on `-- name:` headers)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from sqlalchemy import TextClause, text

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@cache
def _statements() -> dict[str, str]:
    source = (Path(__file__).with_name("queries.sql")).read_text()
    parts = _HEADER.split(source)
    # parts = [preamble, name1, body1, name2, body2, ...]
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


@cache
def query(name: str) -> TextClause:
    """The statement named `name` as a SQLAlchemy text clause."""
    return text(_statements()[name])
